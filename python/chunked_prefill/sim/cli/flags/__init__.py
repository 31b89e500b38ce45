"""The flag groups the subcommands share: each module adds one group to a parser and reads
it back (workload, scheduler, engine, roofline, fleet, SLOs, output)."""
