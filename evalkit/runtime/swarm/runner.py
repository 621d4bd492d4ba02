"""``SwarmRun``: one mission that a cheap triage call may stage over a plan of steps.

``SwarmRun`` is a ``Run`` whose work between ``mission_started`` and the
end is routed:

1. **triage** — one plain call; only a clear plan request stages the run.
   Anything else (direct, an unreadable reply, a failed call) routes
   **direct**: the ordinary loop, every record of it carrying
   ``branch: "direct"`` (``mission_finished`` too).
2. **plan** — one plain call returning steps (``evalkit.runtime.swarm.plan``);
   a plan that does not check out routes direct as well. A good one rides the
   first ``step_started`` as ``plan`` (a turn-level record: no ``branch``).
3. **steps** — rung by rung, each step is a lane of this run
   (``Run.branch_off``): the same plane, governor, results, recording,
   stream, usage, clock and step counter, its own conversation, its records
   carrying ``branch`` = the step's id. The steps of one rung are
   independent: with ``parallel`` > 1 they run on that many threads at once.
   A step ends with its summary (its final reply, which is not an ``answer``
   record). A step that ends any other way — the run's step or time budget
   ran out, a gate with nobody to decide it, a model call that could not be
   made — ends the run the same way; its siblings stop at their next boundary.
4. **synthesis** — back on the main line: one turn (or more, if it calls a
   tool or a repair is due) given every step's goal, summary and tool
   results, whose answer goes through the ordinary answer path — grounding,
   repair, caveat — over every tool result of the run. It is the last
   ``answer`` of the stream.

``meta.json`` gets ``swarm``: the route and why, the plan, and how each step
ended. See docs/SWARM.md.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from evalkit.runtime.cancel import CancelToken
from evalkit.runtime.run import Run, _CallFailed, _Finish, for_branch
from evalkit.runtime.swarm import prompts
from evalkit.runtime.swarm.plan import Plan, PlanStep, read_plan, read_route
from evalkit.runtime.swarm.prompts import Settled

#: Seconds a cancelled run waits for its parallel lanes to notice before it closes anyway.
_GRACE_S = 2.0
#: How often a parallel lane's pause looks at its halt flag.
_SLICE_S = 0.05


class _Halted(BaseException):
    """A sibling step ended the run: this lane stops at its next boundary.

    A BaseException, so that nothing on the way (a model call's error
    handling) mistakes it for this step's own failure.
    """


@dataclass
class _StepEnd:
    """How one step's lane ended."""

    step: PlanStep
    finish: _Finish

    @property
    def settled(self) -> bool:
        return self.finish.outcome == "answered"


class SwarmRun(Run):
    """``Run`` routed by triage: ``SwarmRun(model, plane, parallel=N, **run_options)``."""

    def __init__(self, model: Any, plane: Any, *, parallel: int = 1, **options: Any) -> None:
        super().__init__(model, plane, **options)
        if parallel < 1:
            raise ValueError("parallel must be 1 or more")
        self.parallel = parallel
        #: What ``meta.json``'s ``swarm`` says when the run closes.
        self.account: dict[str, Any] = {"route": None, "parallel": parallel}
        door = self.closing_meta
        self.closing_meta = lambda: {**(door() if door is not None else {}),
                                     "swarm": self.account}

    # -- routing ---------------------------------------------------------------------------

    def _work(self, objective: str) -> None:
        self._log = _StepLog()
        self._outlet.watchers.append(self._log)
        if self.resume is not None:  # only a direct stretch is resumed (the door refuses a plan)
            self._go_direct("a resumed run continues its direct loop")
            self._loop()
            return
        plan, why = self._route(objective)
        if plan is None:
            self._go_direct(why)
            self._loop()
            return
        self._stage(objective, plan, why)

    def _route(self, objective: str) -> tuple[Plan | None, str]:
        """Triage, then the plan: a plan only when both are clear; else why not."""
        index = self._counter.taken
        self.token.check()
        self._check_clock()
        try:
            triage = self._complete(index, prompts.triage_messages(objective, self._catalogue),
                                    None, "plain")
        except _CallFailed as failed:
            return None, f"the triage call failed ({failed.reason}); the run went direct"
        staged, why = read_route(triage.content)
        if not staged:
            return None, why
        self.token.check()
        self._check_clock()
        try:
            reply = self._complete(index, prompts.plan_messages(objective, self._catalogue),
                                   None, "plain")
        except _CallFailed as failed:
            return None, f"the plan call failed ({failed.reason}); the run went direct"
        plan, problem = read_plan(reply.content)
        if plan is None:
            return None, f"the plan could not be used: {problem}; the run went direct"
        return plan, why

    def _go_direct(self, why: str) -> None:
        self.account.update(route="direct", why=why)
        self.branch = "direct"
        self.model = for_branch(self.model, "direct")

    # -- staged ----------------------------------------------------------------------------

    def _stage(self, objective: str, plan: Plan, why: str) -> None:
        self.account.update(route="staged", why=why, plan=plan.record(), steps=[])
        self.token.check()
        self._check_clock()
        self._open_step({"plan": plan.record()})
        settled: dict[str, Settled] = {}
        for rung in plan.rungs():
            ends = self._wave(objective, plan, rung, settled)
            for end in ends:
                self.account["steps"].append(_account(end))
            failed = next((end for end in ends if not end.settled), None)
            if failed is not None:
                raise _ended_by(failed)
            for end in ends:
                settled[end.step.id] = Settled(end.step, end.finish.answer or "",
                                               self._log.results(end.step.id))
        self._synthesize(objective, [settled[step.id] for step in plan.steps])

    def _wave(self, objective: str, plan: Plan, steps: list[PlanStep],
              settled: dict[str, Settled]) -> list[_StepEnd]:
        """One rung's steps, serially on this thread or ``parallel`` at a time."""
        briefs = {step.id: prompts.step_brief(objective, plan, step,
                                              [settled[s.id] for s in plan.needs_of(step)])
                  for step in steps}
        if self.parallel == 1 or len(steps) == 1:
            ends: list[_StepEnd] = []
            for step in steps:
                ends.append(self._run_step(step, briefs[step.id], self.token))
                if not ends[-1].settled:
                    break
            return ends
        return self._in_parallel(steps, briefs)

    def _run_step(self, step: PlanStep, brief: str, token: Any) -> _StepEnd:
        """One step as a lane of this run: the ordinary loop until it settles or ends."""
        lane = self.branch_off(step.id, [self._messages[0], {"role": "user", "content": brief}],
                               token=token)
        try:
            lane._loop()
        except _Finish as done:
            return _StepEnd(step, done)
        raise AssertionError("the loop ends only by raising _Finish")  # pragma: no cover

    def _in_parallel(self, steps: list[PlanStep], briefs: dict[str, str]) -> list[_StepEnd]:
        """Up to ``parallel`` lanes at once; the first step to end unsettled halts the rest."""
        halt = threading.Event()
        token = _LaneToken(self.token, halt)
        todo, taking = deque(steps), threading.Lock()
        ends: dict[str, _StepEnd] = {}
        errors: list[BaseException] = []

        def work() -> None:
            while not halt.is_set():
                with taking:
                    if not todo:
                        return
                    step = todo.popleft()
                try:
                    end = self._run_step(step, briefs[step.id], token)
                except _Halted:
                    return
                except BaseException as exc:  # a cancel this lane saw, or a bug: the run's
                    errors.append(exc)
                    halt.set()
                    return
                ends[step.id] = end
                if not end.settled:
                    halt.set()

        workers = [threading.Thread(target=work, name=f"evalkit-swarm-{n + 1}", daemon=True)
                   for n in range(min(self.parallel, len(steps)))]
        for worker in workers:
            worker.start()
        try:
            for worker in workers:
                worker.join()
        except BaseException:  # cancelled while waiting (SIGTERM raises into this thread)
            halt.set()
            self.token.cancel()
            deadline = time.monotonic() + _GRACE_S
            for worker in workers:
                worker.join(timeout=max(0.0, deadline - time.monotonic()))
            raise
        if errors:
            raise errors[0]
        return [ends[step.id] for step in steps if step.id in ends]

    def _synthesize(self, objective: str, settled: list[Settled]) -> None:
        """The main line's last stretch: the answer, from every settled step."""
        text = prompts.synthesis_prompt(objective, settled, limit=self.bounds.result_chars)
        self._messages = [self._messages[0], {"role": "user", "content": text}]
        self._loop()


class _StepLog:
    """A watcher on the run's outlet: each branch's ``tool_result`` records, as emitted."""

    def __init__(self) -> None:
        self._results: dict[str, list[dict[str, Any]]] = defaultdict(list)

    def see(self, record: dict[str, Any]) -> None:
        branch = record.get("branch")
        if record.get("event") == "tool_result" and isinstance(branch, str):
            self._results[branch].append(record)

    def results(self, branch: str) -> list[dict[str, Any]]:
        return list(self._results.get(branch, ()))


class _LaneToken:
    """A parallel lane's view of the run's cancel token.

    Checks see the run's cancel and the rung's halt. Signals only ever raise
    into the main thread, so a lane has nothing to shield; the run's token
    keeps its shield count to the main thread.
    """

    def __init__(self, token: CancelToken, halt: threading.Event) -> None:
        self._token, self._halt = token, halt

    @property
    def cancelled(self) -> bool:
        return self._token.cancelled

    def cancel(self) -> None:
        self._token.cancel()

    def check(self) -> None:
        self._token.check()
        if self._halt.is_set():
            raise _Halted()

    def pause(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while True:
            self.check()
            left = end - time.monotonic()
            if left <= 0:
                return
            self._halt.wait(min(left, _SLICE_S))

    @contextmanager
    def shield(self) -> Iterator[None]:
        yield


def _account(end: _StepEnd) -> dict[str, Any]:
    """One step in ``meta.json``'s ``swarm.steps``."""
    out: dict[str, Any] = {"id": end.step.id, "outcome": end.finish.outcome}
    if end.settled:
        out["summary"] = end.finish.answer
    if end.finish.reason:
        out["reason"] = end.finish.reason
    return out


def _ended_by(end: _StepEnd) -> _Finish:
    """The run's end when a step ended unsettled: the step's outcome, its reason named."""
    reason = end.finish.reason
    return _Finish(end.finish.outcome, budget=end.finish.budget,
                   reason=f"step {end.step.id}: {reason}" if reason else None)
