"""The runs: a workload through the planner (:mod:`.planner`, :mod:`.planner_loop`) or the
serving scheduler (:mod:`.serving`, :mod:`.serving_loop`) on one replica or a fleet behind a
router (:mod:`.router`), which scheduler implementation runs (:mod:`.backend`), and what a run
returns (:mod:`.results`, measured over the steady part, :mod:`.steady`)."""
