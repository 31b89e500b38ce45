"""``Scheduler``: vLLM's ``SchedulerInterface`` over :class:`~chunked_prefill.ServingScheduler`.

The core decides everything a step holds (which requests run, their tokens and blocks, which
are preempted, what the prefix cache gives); this class only translates. vLLM's ``Request``
objects stay the engine's record of each request: their status, computed tokens and output
tokens are kept as vLLM's own scheduler keeps them, and vLLM's own ``check_stop`` decides
when a request stops. Block ids are shifted by one, as vLLM keeps block 0 as its null block.
"""

from __future__ import annotations

import itertools
import logging
from collections import defaultdict
from collections.abc import Iterable
from time import perf_counter
from typing import Any

from vllm.v1.core.sched.interface import PauseState, SchedulerInterface
from vllm.v1.core.sched.output import CachedRequestData, NewRequestData, SchedulerOutput
from vllm.v1.core.sched.utils import check_stop
from vllm.v1.engine import EngineCoreEventType, EngineCoreOutput, EngineCoreOutputs
from vllm.v1.metrics.stats import PrefixCacheStats, SchedulerStats
from vllm.v1.request import Request, RequestStatus

from .._core import Batch, ServingScheduler
from ._config import PREFIX, check_supported, serving_config
from ._recorder import recorder_for
from ._requests import max_new_tokens, salt_of, unsupported

logger = logging.getLogger("chunked_prefill.vllm")

_RUNNING = RequestStatus.RUNNING
_WAITING = RequestStatus.WAITING


class Scheduler(SchedulerInterface):
    """A drop-in ``scheduler_cls`` for vLLM: ``LLM(..., scheduler_cls=
    "chunked_prefill.vllm.Scheduler", async_scheduling=False)``.

    Options, set by subclassing (vLLM constructs the class itself):
    ``steps_csv``: a path to record each step to (the ``CHUNKED_PREFILL_STEPS_CSV``
    environment variable wins); ``max_prefills_per_step``: the core's cap on prefill chunks
    per step (default: vLLM's ``max_num_partial_prefills`` where it exists, else none).
    """

    steps_csv: str | None = None
    max_prefills_per_step: int | None = None

    def __init__(
        self,
        vllm_config: Any,
        kv_cache_config: Any,
        structured_output_manager: Any,
        block_size: int,
        hash_block_size: int | None = None,
        mm_registry: Any = None,
        include_finished_set: bool = False,
        log_stats: bool = False,
    ) -> None:
        check_supported(vllm_config, kv_cache_config)
        self.vllm_config = vllm_config
        self.scheduler_config = vllm_config.scheduler_config
        self.cache_config = vllm_config.cache_config
        self.kv_cache_config = kv_cache_config
        self.structured_output_manager = structured_output_manager
        self.log_stats = log_stats
        self.block_size = block_size
        self.max_model_len: int = vllm_config.model_config.max_model_len
        self.use_v2_model_runner = bool(getattr(vllm_config, "use_v2_model_runner", False))
        self.use_priority = self.scheduler_config.policy == "priority"
        config = serving_config(
            vllm_config, kv_cache_config, block_size, self.max_prefills_per_step
        )
        self.core = ServingScheduler(config)
        self.num_kv_groups = len(kv_cache_config.kv_cache_groups)
        # The engine reads these as attributes: no KV or encoder-cache connector.
        self.connector = None
        self.ec_connector = None
        self.requests: dict[str, Request] = {}
        self._core_ids: dict[str, int] = {}
        # Keyed as the core types its ids (int | str); this adapter hands it ints only.
        self._by_core: dict[int | str, Request] = {}
        self._fast: dict[int | str, _Fast] = {}  # what update_from_output reads per token
        # vLLM's engine hashes a request's blocks with these (its block hasher's early exit).
        self._hash_block_size = hash_block_size
        self._hash_lookahead = int(getattr(vllm_config, "num_hash_lookahead_tokens", 0) or 0)
        self._next_id = itertools.count()
        self.finished_req_ids: set[str] = set()
        self.finished_req_ids_dict: dict[int, set[str]] | None = (
            defaultdict(set) if include_finished_set else None
        )
        self._preempted: set[str] = set()
        self._prev_scheduled: set[str] = set()  # the V1 runner's persistent batch
        self._pending: Batch | None = None
        self._refused: list[Request] = []  # finished at add_request, reported at the next update
        self._held: list[Request] = []  # added while paused
        self._pause_state = PauseState.UNPAUSED
        self._prefix_stats = PrefixCacheStats()
        self._recorder = recorder_for(self.steps_csv)

    # --- requests in ---------------------------------------------------------------------

    def add_request(self, request: Request) -> None:
        rid = request.request_id
        if rid in self.requests:
            raise ValueError(f"{PREFIX}: request id {rid!r} is already tracked")
        reason = unsupported(request)
        if reason is not None:
            self._refuse(request, RequestStatus.FINISHED_ERROR, f"does not support {reason}")
            return
        self.requests[rid] = request
        if self.log_stats:
            request.record_event(EngineCoreEventType.QUEUED)
        if self._pause_state != PauseState.UNPAUSED:
            self._held.append(request)
            return
        self._admit(request)

    def _admit(self, request: Request) -> None:
        core_id = next(self._next_id)
        try:
            self.core.add_request(
                core_id,
                request.prompt_token_ids,
                max_new_tokens(request, self.max_model_len),
                priority=request.priority if self.use_priority else 0,
                cache_salt=salt_of(request.cache_salt),
            )
        except (ValueError, OverflowError) as err:
            del self.requests[request.request_id]
            self._refuse(request, RequestStatus.FINISHED_IGNORED, f"cannot serve it: {err}")
            return
        self._core_ids[request.request_id] = core_id
        self._by_core[core_id] = request
        self._fast[core_id] = _fast_entry(request, self.max_model_len)

    def _refuse(self, request: Request, status: RequestStatus, why: str) -> None:
        logger.error("%s %s (request %s)", PREFIX, why, request.request_id)
        request.status = status
        self._refused.append(request)
        if self.finished_req_ids_dict is not None:
            self.finished_req_ids_dict[request.client_index].add(request.request_id)

    def finish_requests(
        self, request_ids: str | Iterable[str] | None, finished_status: RequestStatus
    ) -> list[Request]:
        """Aborts (and stop strings found by the frontend): the core forgets the requests and
        frees their blocks at once, also while their step runs."""
        if isinstance(request_ids, str):
            request_ids = (request_ids,)
        elif request_ids is None:
            request_ids = list(self.requests)
        done = []
        for rid in set(request_ids):
            request = self.requests.get(rid)
            if request is None or request.is_finished():
                continue
            core_id = self._core_ids.get(rid)
            if core_id is None:
                self._held.remove(request)
            else:
                self.core.abort(core_id)
            request.status = finished_status
            self._free(request)
            done.append(request)
        return done

    def _free(self, request: Request) -> None:
        rid = request.request_id
        del self.requests[rid]
        core_id = self._core_ids.pop(rid, None)
        if core_id is not None:
            del self._by_core[core_id]
            del self._fast[core_id]
        self.finished_req_ids.add(rid)
        if self.finished_req_ids_dict is not None:
            self.finished_req_ids_dict[request.client_index].add(rid)

    # --- one step ------------------------------------------------------------------------

    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        recorder = self._recorder
        if recorder is not None:
            recorder.begin()
        start = perf_counter()
        if self._pause_state == PauseState.PAUSED_ALL:
            output = self._output(SchedulerOutput.make_empty())
        else:
            self._pending = batch = self.core.schedule()
            for core_id in batch.preempted:
                self._preempt(self._by_core[core_id])
            output = self._output(self._translate(batch))
        if recorder is not None:
            recorder.add_scheduler_time(perf_counter() - start)
        return output

    def _output(self, output: SchedulerOutput) -> SchedulerOutput:
        output.finished_req_ids, self.finished_req_ids = self.finished_req_ids, set()
        output.preempted_req_ids, self._preempted = self._preempted, set()
        output.num_common_prefix_blocks = [0] * self.num_kv_groups
        return output

    def _preempt(self, request: Request) -> None:
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        if self.log_stats:
            request.record_event(EngineCoreEventType.PREEMPTED)
        self._preempted.add(request.request_id)

    def _translate(self, batch: Batch) -> SchedulerOutput:
        """The ``SchedulerOutput`` of ``batch``: admitted and resumed requests with their whole
        block tables, running ones with the blocks they got in this step."""
        v2 = self.use_v2_model_runner
        prev = self._prev_scheduled
        new_reqs: list[NewRequestData] = []
        cached = CachedRequestData.make_empty()
        req_ids, new_block_ids = cached.req_ids, cached.new_block_ids
        num_computed, num_output = cached.num_computed_tokens, cached.num_output_tokens
        num_scheduled: dict[str, int] = {}
        fast = self._fast
        columns = zip(batch.items, batch.request_ids, batch.starts, batch.token_counts)
        for item, core_id, start, tokens in columns:
            rid, request, out, _, _, _ = fast[core_id]
            num_scheduled[rid] = tokens
            blocks = item.new_blocks
            table = ([b + 1 for b in blocks],) if blocks else None
            status = request.status
            if status is not _RUNNING:
                self._start_running(request, item)
                if status == _WAITING or v2:
                    new_reqs.append(self._new_request_data(request, table or ([],), v2))
                    request.num_computed_tokens = start + tokens
                    continue
                cached.resumed_req_ids.add(rid)
            req_ids.append(rid)
            new_block_ids.append(table)
            num_computed.append(start)
            num_output.append(len(out))
            if not v2 and rid not in prev:
                cached.all_token_ids[rid] = list(request.all_token_ids)
            request.num_computed_tokens = start + tokens
        if not v2:
            self._prev_scheduled = set(num_scheduled)
        return SchedulerOutput(
            scheduled_new_reqs=new_reqs,
            scheduled_cached_reqs=cached,
            num_scheduled_tokens=num_scheduled,
            total_num_scheduled_tokens=batch.num_prefill_tokens + batch.num_decode_tokens,
            scheduled_spec_decode_tokens={},
            scheduled_encoder_inputs={},
            finished_req_ids=set(),
            free_encoder_mm_hashes=[],
        )

    @staticmethod
    def _new_request_data(request: Request, table: tuple[list[int]], v2: bool) -> NewRequestData:
        # The V2 runner takes every token to compute (a resumed request's output included).
        prefill = list(request.all_token_ids) if v2 else None
        return NewRequestData.from_request(request, table, prefill)

    def _start_running(self, request: Request, item: Any) -> None:
        """Admission (new or resumed): the prefix-cache hit is already computed."""
        request.num_computed_tokens = item.start
        first = request.num_preemptions == 0
        if first and request.prefill_stats is not None:
            request.prefill_stats.set(
                num_prompt_tokens=request.num_prompt_tokens,
                num_local_cached_tokens=item.cached_tokens,
                num_external_cached_tokens=0,
            )
        if self.log_stats:
            request.record_event(EngineCoreEventType.SCHEDULED)
            if self.core.config.prefix_caching:
                self._prefix_stats.record(
                    num_tokens=request.num_tokens,
                    num_hits=item.cached_tokens,
                    preempted=not first,
                )
        request.status = _RUNNING

    def update_from_output(
        self, scheduler_output: SchedulerOutput, model_runner_output: Any
    ) -> dict[int, EngineCoreOutputs]:
        start = perf_counter()
        batch, self._pending = self._pending, None
        outputs: dict[int, list[EngineCoreOutput]] = defaultdict(list)
        if batch is not None:
            self._apply(batch, scheduler_output, model_runner_output, outputs)
        self._report_refused(outputs)
        result = {client: EngineCoreOutputs(outputs=outs) for client, outs in outputs.items()}
        self._attach_finished(result)
        stats = self.make_stats(
            cudagraph_stats=getattr(model_runner_output, "cudagraph_stats", None)
        )
        if stats is not None:
            eco = next(iter(result.values()), None)
            if eco is None:
                result[0] = eco = EngineCoreOutputs()
            eco.scheduler_stats = stats
        recorder = self._recorder
        if recorder is not None and batch is not None and len(batch):
            recorder.add_scheduler_time(perf_counter() - start)
            recorder.end(batch)
        return result

    def _apply(
        self,
        batch: Batch,
        scheduler_output: SchedulerOutput,
        runner: Any,
        outputs: dict[int, list[EngineCoreOutput]],
    ) -> None:
        """Append the sampled tokens, stop by vLLM's rules, then tell the core.

        Per token this does what ``Request.append_output_token_ids``, ``check_stop`` and
        :meth:`_emit` do, without their calls where they would do nothing: the block hasher
        only when a block fills, ``check_stop`` only when the token or the length may stop,
        :meth:`_emit` only for logprobs, prompt logprobs or a stop."""
        sampled = runner.sampled_token_ids
        if not sampled:
            self._finish(batch, {}, [], runner, outputs)
            return
        index = runner.req_id_to_index
        slow_emit = bool(runner.prompt_logprobs_dict) or runner.logprobs is not None
        fast = self._fast
        hash_size, lookahead = self._hash_block_size, self._hash_lookahead
        hash_every = hash_size or 1
        tokens: dict[int | str, int] = {}
        stopped: list[int | str] = []
        for core_id in batch.request_ids:
            entry = fast.get(core_id)
            if entry is None:
                continue  # aborted while its step ran
            rid, request, out, all_ids, stops, cap = entry
            new = sampled[index[rid]]
            if not new:
                continue
            token = new[0]
            out.append(token)
            all_ids.append(token)
            # The hasher hashes nothing before a block fills (block hashes are kept up to
            # date at each token, so one fills at a multiple of the hash block size).
            if (
                (len(all_ids) - lookahead) % hash_every == 0
                and request._block_hasher is not None
                and (
                    hash_size is None
                    or len(all_ids) - lookahead >= (len(request.block_hashes) + 1) * hash_size
                )
            ):
                request.update_block_hashes()
            tokens[core_id] = token
            done = (token in stops or len(out) >= cap) and check_stop(request, self.max_model_len)
            if done:
                stopped.append(core_id)
                output = self._emit(request, [token], runner, done)
            elif slow_emit or request.prefill_stats is not None or request.events:
                output = self._emit(request, [token], runner, done)
            else:  # the common decode: what _emit gives when it has nothing to take
                output = EngineCoreOutput(
                    request_id=rid,
                    new_token_ids=[token],
                    stop_reason=request.stop_reason,
                    trace_headers=request.trace_headers,
                )
            outputs[request.client_index].append(output)
        self._finish(batch, tokens, stopped, runner, outputs)

    def _finish(
        self,
        batch: Batch,
        tokens: dict[int | str, int],
        finished: list[int | str],
        runner: Any,
        outputs: dict[int, list[EngineCoreOutput]],
    ) -> None:
        for core_id in self.core.update(batch, token_ids=tokens, finished=finished):
            request = self._by_core[core_id]
            if not request.is_finished():  # the core's cap is vLLM's: this is a safety net
                request.status = RequestStatus.FINISHED_LENGTH_CAPPED
                outputs[request.client_index].append(self._emit(request, [], runner, True))
            self._free(request)

    def _emit(self, request: Request, new: list[int], runner: Any, done: bool) -> EngineCoreOutput:
        rid = request.request_id
        logprobs = None
        params = request.sampling_params
        if params.num_logprobs is not None and runner.logprobs is not None and new:
            logprobs = runner.logprobs.slice_request(runner.req_id_to_index[rid], len(new))
        prefill_stats = request.take_prefill_stats()
        if prefill_stats is not None:
            computed = min(request.num_computed_tokens, request.num_prompt_tokens)
            prefill_stats.finalize(computed // self.block_size * self.block_size)
        return EngineCoreOutput(
            request_id=rid,
            new_token_ids=new,
            finish_reason=request.get_finished_reason() if done else None,
            new_logprobs=logprobs,
            new_prompt_logprobs_tensors=runner.prompt_logprobs_dict.get(rid),
            stop_reason=request.stop_reason,
            events=request.take_events(),
            prefill_stats=prefill_stats,
            trace_headers=request.trace_headers,
        )

    def _report_refused(self, outputs: dict[int, list[EngineCoreOutput]]) -> None:
        for request in self._refused:
            outputs[request.client_index].append(
                EngineCoreOutput(
                    request_id=request.request_id,
                    new_token_ids=[],
                    finish_reason=request.get_finished_reason(),
                    events=request.take_events(),
                    trace_headers=request.trace_headers,
                )
            )
        self._refused = []

    def _attach_finished(self, result: dict[int, EngineCoreOutputs]) -> None:
        finished = self.finished_req_ids_dict
        if not finished:
            return
        for client, ids in finished.items():
            eco = result.get(client)
            if eco is None:
                result[client] = EngineCoreOutputs(finished_requests=ids)
            else:
                eco.finished_requests = ids
        finished.clear()

    # --- counts and stats ----------------------------------------------------------------

    def get_request_counts(self) -> tuple[int, int]:
        core = self.core
        return core.num_running, core.num_waiting + len(self._held)

    def get_num_unfinished_requests(self) -> int:
        if self._pause_state == PauseState.PAUSED_ALL:
            return 0
        return len(self.core)

    def has_finished_requests(self) -> bool:
        return bool(self.finished_req_ids)

    def has_request(self, request_id: str) -> bool:
        return request_id in self.requests

    def get_kv_cache_usage(self) -> float:
        num_blocks = self.core.config.num_blocks
        return 1.0 - self.core.num_free_blocks / num_blocks

    def make_stats(
        self,
        spec_decoding_stats: Any = None,
        kv_connector_stats: Any = None,
        cudagraph_stats: Any = None,
        perf_stats: Any = None,
        ec_connector_stats: Any = None,
    ) -> SchedulerStats | None:
        if not self.log_stats:
            return None
        prefix_stats, self._prefix_stats = self._prefix_stats, PrefixCacheStats()
        running, waiting = self.get_request_counts()
        return SchedulerStats(
            num_running_reqs=running,
            num_waiting_reqs=waiting,
            kv_cache_usage=self.get_kv_cache_usage(),
            prefix_cache_stats=prefix_stats,
            cudagraph_stats=cudagraph_stats,
            perf_stats=perf_stats,
        )

    @property
    def num_preemptions(self) -> int:
        """Preemptions since the start (the core's count)."""
        return self.core.num_preemptions

    @property
    def running(self) -> list[Request]:
        """The running requests (vLLM's scheduler keeps this list; here it is a view)."""
        return [r for r in self.requests.values() if r.status == _RUNNING]

    @property
    def waiting(self) -> list[Request]:
        """The waiting and preempted requests (a view, as :attr:`running`)."""
        return [r for r in self.requests.values() if r.status != _RUNNING]

    # --- the rest of the interface -------------------------------------------------------

    @property
    def pause_state(self) -> PauseState:
        return self._pause_state

    def set_pause_state(self, pause_state: PauseState) -> None:
        """``PAUSED_ALL``: steps schedule nothing. ``PAUSED_NEW``: requests added from now on
        wait outside the core until unpaused (the core's waiting ones may still start)."""
        self._pause_state = pause_state
        if pause_state == PauseState.UNPAUSED:
            held, self._held = self._held, []
            for request in held:
                self._admit(request)

    def reset_prefix_cache(
        self, reset_running_requests: bool = False, reset_connector: bool = False
    ) -> bool:
        """Forget the prefix cache: only while no request is tracked (a new core), as vLLM
        does without ``reset_running_requests``; otherwise ``False``."""
        if len(self.core) or self._pending is not None:
            return False
        self.core = ServingScheduler(self.core.config)
        return True

    def reset_encoder_cache(self) -> None:
        """Nothing to reset: encoder inputs are refused."""

    def get_grammar_bitmask(self, scheduler_output: SchedulerOutput) -> None:
        return None  # structured output is refused per request

    def update_draft_token_ids(self, draft_token_ids: Any) -> None:
        raise NotImplementedError(f"{PREFIX} does not support speculative decoding")

    def update_draft_token_ids_in_output(
        self, draft_token_ids: Any, scheduler_output: SchedulerOutput
    ) -> None:
        raise NotImplementedError(f"{PREFIX} does not support speculative decoding")

    def shutdown(self) -> None:
        if self._recorder is not None:
            self._recorder.close()
            self._recorder = None


# (request id, request, its output token list, its token list, the tokens that may stop it,
# the output length at which its length may stop it)
_Fast = tuple[str, Request, list[int], list[int], frozenset[Any], int]


def _fast_entry(request: Request, max_model_len: int) -> _Fast:
    """What :meth:`Scheduler._apply` reads per token. ``check_stop`` cannot stop a request
    whose last token is none of ``stops`` while its output is shorter than ``cap`` (it
    stops on EOS, a stop token, ``max_tokens`` or ``max_model_len`` tokens in all, or a
    repetition, checked on every token when asked for: ``cap`` 0)."""
    params = request.sampling_params
    stops = frozenset((params.eos_token_id, *(params.stop_token_ids or ())))
    cap = max_new_tokens(request, max_model_len)  # the core's cap too
    if getattr(params, "repetition_detection", None) is not None:
        cap = 0
    return (
        request.request_id,
        request,
        request._output_token_ids,
        request._all_token_ids,
        stops,
        cap,
    )
