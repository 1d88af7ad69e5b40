"""Fault tolerance of remote env runners: sample from the healthy ones, restore the lost ones.

RLlib 2.60 and Ray provide the mechanics (``docs/engine.md``, "Fault tolerance"): Ray restarts
a dead env-runner actor up to ``max_restarts`` times (``AlgorithmConfig.fault_tolerance``), and
the ``EnvRunnerGroup``'s actor manager takes an actor whose call failed out of service.
:class:`RunnerFaults` is what a :class:`~marl.engine.trainer.Trainer` adds on top (in place of
RLlib's ``Algorithm.restore_env_runners``, whose blocking probe waits while an actor restarts):

* calls on the runners return the results of the healthy ones and say which runner each
  came from; an exception raised *inside* a runner (a bad env, a NaN guard) is raised
  again in the driver, it is never mistaken for a lost runner;
* a runner whose process was replaced (Ray restarted it between two calls) is noticed by
  its process id, so a rollout of a fresh, not yet synced runner never reaches a learner;
* lost runners are pinged without waiting; one that answers gets the learners' current
  weights before it samples again;
* every loss and restore prints one line (``[marl] env runner <i> lost (<reason>);
  continuing with <k> of <n>``, ``[marl] env runner <i> restored ...``) and is counted in
  the iteration's metrics (``runners_healthy``, ``runners_lost``, ``runners_restored``);
* when no runner is left, it waits ``env_runner_restart_timeout_s`` for a restart, or
  raises :class:`~marl.errors.EnvRunnersLost` at once when every runner has used up its
  ``env_runner_restarts``.
"""

from __future__ import annotations

import os
import pickle
import re
import sys
import time
import traceback
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

import ray
from ray.exceptions import RayError, RayTaskError

from marl.engine.rllib_seam import runner_actors, runner_manager
from marl.errors import EnvRunnersLost, MarlError

if TYPE_CHECKING:
    from marl.engine.trainer import Trainer

POLL_S = 0.5  # pause between pings while no runner is left
PING_RESEND_S = 1.0  # a ping to a lost runner unanswered this long is replaced by a new one
ASYNC_TAG = "marl_async"  # RLlib actor-manager tag of the calls RunnerFaults.submit starts


def fault_tolerance_settings(cfg: Any) -> Dict[str, Any]:
    """Keyword arguments of RLlib's ``AlgorithmConfig.fault_tolerance`` for a marl config
    (``env_runner_restarts``: Ray's ``max_restarts`` of every env-runner actor; with 0 a dead
    runner stays dead while the others go on)."""
    return {
        "restart_failed_env_runners": True,  # RLlib then tolerates lost actors in its own calls (weight sync)
        "max_num_env_runner_restarts": int(cfg.env_runner_restarts),
    }


def kill_env_runner(trainer: Trainer, index: int, restart: bool = True) -> None:
    """Kill remote env runner ``index`` (1-based, as in the printed lines) of ``trainer``, as a
    crash would: with ``restart`` Ray restarts it (within ``env_runner_restarts``), else it stays
    dead. For fault drills (``examples/fault_tolerance.py``, ``tests/test_faults.py``).

    Raises:
        MarlError: ``trainer`` has no remote runner ``index`` (names the valid ones).
    """
    actors = runner_actors(trainer.env_runner_group)  # RLlib's runner id -> actor handle
    if index not in actors:
        raise MarlError(f"no remote env runner {index}; the trainer has {sorted(actors) or 'none'}.")
    ray.kill(actors[index], no_restart=not restart)


class _WithPid:
    """``fn(runner)`` run inside an env-runner actor: ``(process id, result, exception or None)``.

    An exception is returned, not raised: RLlib's ``FaultAwareApply.apply`` would answer it by
    sleeping ``delay_between_env_runner_restarts_s`` and exiting the actor, turning a bad env
    into a lost runner (and hiding the error)."""

    def __init__(self, fn: Callable[[Any], Any]):
        self.fn = fn

    def __call__(self, runner: Any) -> Tuple[int, Any, Any]:
        try:
            return os.getpid(), self.fn(runner), None
        except Exception as e:  # noqa: BLE001 - raised again in the driver (RunnerFaults._call_runners)
            return os.getpid(), None, _portable(e)


def _portable(e: Exception) -> Exception:
    """``e`` with the runner's traceback as a note, or a RuntimeError with its text if it does not pickle."""
    trace = "".join(traceback.format_exception(e))
    try:
        pickle.dumps(e)
    except Exception:  # noqa: BLE001 - any pickling failure
        return RuntimeError(f"{type(e).__name__}: {e} (raised in an env runner)\n{trace}")
    if sys.version_info >= (3, 11):  # exception notes are new in 3.11: on 3.10 the runner's traceback is lost
        e.add_note(f"raised in env runner process {os.getpid()}:\n{trace}")
    return e


class _WithWeights:
    """Load the weights in object ``ref`` (RLlib's ``{rl_module, weights_seq_no}`` state; without a sequence number
    a runner loads them whatever its own) into a runner, then run ``fn`` on it: a restored runner's sync, or the
    weights an asynchronous rollout samples with, whatever weight syncs RLlib's own calls delivered or dropped."""

    def __init__(self, ref: ray.ObjectRef, fn: Callable[[Any], Any] = lambda runner: None):
        self.ref, self.fn = ref, fn

    def __call__(self, runner: Any) -> Any:
        runner.set_state(ray.get(self.ref))
        return self.fn(runner)


def _noop(runner: Any) -> None:
    return None


def _reason(err: BaseException) -> str:
    """A short cause of a lost runner: the error class and the last line of its message without
    Ray's boilerplate (actor id, "temporarily unavailable", "the task may or may not ...")."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    text = re.sub(
        r"The actor [0-9a-f]+ is unavailable: |The actor is temporarily unavailable: ", "", lines[-1] if lines else ""
    )
    text = re.sub(r"\s*The task may or may not have been executed on the actor\.", "", text).strip()
    return f"{type(err).__name__}: {text[:160]}" if text else type(err).__name__


class RunnerFaults:
    """The remote env runners of one trainer, as marl sees them (module docstring).

    Args:
        trainer: the :class:`~marl.engine.trainer.Trainer` (its ``env_runner_group``,
            ``learner_group`` and ``cfg``: ``env_runner_restarts``, ``env_runner_restart_timeout_s``).

    Attributes:
        ids: RLlib's remote runner ids (1-based worker indices), in order.
        lost, restored: runners lost and restored so far (counts).
        events: ``{"runner", "event" ("lost" / "restored"), "time" (time.time()), "reason"}`` per event.
    """

    def __init__(self, trainer: Trainer):
        self.trainer = trainer
        self.manager = runner_manager(trainer.env_runner_group)  # RLlib's FaultTolerantActorManager
        self.ids: List[int] = list(self.manager.actor_ids())
        self.budget = int(trainer.cfg.env_runner_restarts)
        self.timeout_s = float(trainer.cfg.env_runner_restart_timeout_s)
        self.losses: Dict[int, int] = {i: 0 for i in self.ids}
        self.down_since: Dict[int, float] = {}  # lost runner -> time.perf_counter() of the loss
        self.lost = self.restored = 0
        self.events: List[Dict[str, Any]] = []
        self.pids: Dict[int, int] = {}  # runner id -> process id of the incarnation that has our weights
        self._pings: Dict[int, Tuple[Any, float]] = {}  # lost runner -> (ping in flight, time sent)
        self._submitted: Optional[Callable[[Any], Any]] = None  # the call submit() started, until collect()
        self._call_runners(self.ids, _noop, adopt=True)

    # ------------------------------------------------------------------ calls
    def foreach(self, fn: Callable[[Any], Any], first_only: bool = False) -> List[Tuple[int, Any]]:
        """``(runner id, fn(runner))`` of every healthy remote runner (of one with ``first_only``).

        Runners lost during the call are reported and left out; with none left, waits for a
        restarted one and calls again.

        Raises:
            EnvRunnersLost: no runner is left and none can come back.
            Exception: whatever ``fn`` raised inside a runner (e.g. a MarlError of the env).
        """
        while True:
            self._notice_unhealthy()
            ids = self._healthy()
            if not ids:
                self.wait_for_runner()
                continue
            out = self._call_runners(ids[:1] if first_only else ids, fn)
            if out:
                return out

    def _call_runners(self, ids: List[int], fn: Callable[[Any], Any], adopt: bool = False) -> List[Tuple[int, Any]]:
        """Run ``fn`` on runners ``ids``; returns ``(id, result)`` of those that answered. A runner
        that answers from another process than the one marl synced (Ray restarted it since) is
        dropped and reported, unless ``adopt`` (a start or a restore: remember its process)."""
        return self._answers(self.manager.foreach_actor(_WithPid(fn), remote_actor_ids=ids, healthy_only=True), adopt)

    def submit(self, fn: Callable[[Any], Any]) -> None:
        """Start ``fn`` on every healthy remote runner without waiting (asynchronous sampling), after giving each
        the learners' current weights; :meth:`collect` returns the results. (RLlib's own weight sync, sent while a
        runner is busy, may reach it after a later call or not at all: the call carries its weights instead.)"""
        self._notice_unhealthy()
        fn = _WithWeights(self.learner_weights(seq=False), fn)
        self._submitted = fn
        self.manager.foreach_actor_async(_WithPid(fn), tag=ASYNC_TAG, remote_actor_ids=self._healthy())

    def collect(self) -> List[Tuple[int, Any]]:
        """``(runner id, result)`` of the call :meth:`submit` started, waiting for every runner it went to.
        Runners lost meanwhile are reported and left out; with none left, ``fn`` runs again through
        :meth:`foreach` (which waits for a restarted runner).

        Raises:
            MarlError: nothing was submitted.
            EnvRunnersLost, Exception: as :meth:`foreach`.
        """
        if self._submitted is None:
            raise MarlError("RunnerFaults.collect() without a submit(): no asynchronous call is in flight.")
        fn, self._submitted = self._submitted, None
        out = self._answers(self.manager.fetch_ready_async_reqs(tags=ASYNC_TAG, timeout_seconds=None), adopt=False)
        return out or self.foreach(fn)

    def _answers(self, results: Any, adopt: bool) -> List[Tuple[int, Any]]:
        """``(id, value)`` of the runners that answered in RLlib's ``results`` (:meth:`_call_runners`)."""
        out = []
        for r in results:
            if not r.ok:
                err = r.get()
                if isinstance(err, RayTaskError) and not isinstance(err.cause, RayError):
                    raise err  # e.g. a result that does not pickle (an instance of the original class too)
                self._lose(r.actor_id, _reason(err))
                continue
            pid, value, error = r.get()
            if error is not None:
                raise error  # raised by fn inside the runner (an env error, a NaN guard): not a lost runner
            known = self.pids.get(r.actor_id, pid)
            if pid != known and not adopt:  # Ray restarted it since its last call: weights and env are fresh
                self.manager.set_actor_state(r.actor_id, healthy=False)
                self._lose(r.actor_id, f"its process was restarted by Ray (pid {known} -> {pid})")
                continue
            self.pids[r.actor_id] = pid
            out.append((r.actor_id, value))
        return sorted(out, key=lambda x: x[0])

    # ------------------------------------------------------------------ health
    def _healthy(self) -> List[int]:
        return [i for i in self.ids if self.manager.is_actor_healthy(i)]

    def _notice_unhealthy(self) -> None:
        """Report runners RLlib took out of service in its own calls (e.g. a weight sync)."""
        for i in self.ids:
            if i not in self.down_since and not self.manager.is_actor_healthy(i):
                self._lose(i, "a call to it failed (see RLlib's log line above)")

    def _lose(self, i: int, reason: str) -> None:
        self.losses[i] += 1
        self.lost += 1
        self.down_since[i] = time.perf_counter()
        self.events.append({"runner": i, "event": "lost", "time": time.time(), "reason": reason})
        k, n = len(self._healthy()), len(self.ids)
        tail = (
            f"continuing with {k} of {n}"
            if k
            else (
                f"no env runner left; waiting up to {self.timeout_s:g} s for a restart"
                if self._restartable()
                else "no env runner left"
            )
        )
        print(f"[marl] env runner {i} lost ({reason}); {tail}", flush=True)

    def _restartable(self) -> List[int]:
        """Lost runners that Ray may still restart (each restarts at most ``env_runner_restarts`` times)."""
        return [i for i in self.down_since if self.losses[i] <= self.budget]

    def _answered(self) -> List[int]:
        """Lost runners that answer a ping, marked healthy again. Non-blocking: answers to pings
        sent earlier are collected; a lost runner without a fresh ping in flight gets a new one
        (a ping sent while Ray restarts the actor hangs about 20 s before it fails, measured)."""
        back, now, actors = [], time.perf_counter(), self.manager.actors()
        for i in list(self.down_since):
            ref, sent = self._pings.get(i, (None, 0.0))
            if ref is not None and ray.wait([ref], timeout=0)[0]:
                try:
                    ray.get(ref)
                    back.append(i)
                    self.manager.set_actor_state(i, healthy=True)
                    self._pings.pop(i)
                    continue
                except RayError:  # still down (restarting, or dead for good)
                    ref = None
            if ref is None or now - sent > PING_RESEND_S:
                self._pings[i] = (actors[i].ping.remote(), now)
        return back

    def restore(self) -> List[int]:
        """Bring back restarted runners: those among the lost ones that answer a ping get the
        learners' weights and are reported. Returns their ids. Cheap when none is lost."""
        self._notice_unhealthy()
        back = self._answered() if self.down_since else []
        if not back:
            return []
        synced = [i for i, _ in self._call_runners(back, _WithWeights(self.learner_weights()), adopt=True)]
        for i in synced:
            down = time.perf_counter() - self.down_since.pop(i)
            self.restored += 1
            self.events.append({"runner": i, "event": "restored", "time": time.time(), "reason": ""})
            print(
                f"[marl] env runner {i} restored (down {down:.1f} s; restarts used {self.losses[i]} of "
                f"{self.budget}); sampling with {len(self._healthy())} of {len(self.ids)}",
                flush=True,
            )
        return synced

    def learner_weights(self, seq: bool = True) -> ray.ObjectRef:
        """The learners' inference weights in the object store, as a runner's ``set_state`` takes them
        (``{rl_module, weights_seq_no}``; without ``seq``, no sequence number: a runner loads them whatever its own)."""
        learners = self.trainer.learner_group
        assert learners is not None  # RLlib types it optional; a Trainer builds it in setup()
        state = learners.get_state(components="learner/rl_module", inference_only=True)["learner"]
        keep = ("rl_module", "weights_seq_no") if seq else ("rl_module",)
        return ray.put({k: v for k, v in state.items() if k in keep})

    def wait_for_runner(self) -> None:
        """With no runner left: wait up to ``env_runner_restart_timeout_s`` for one to be restored.

        Raises:
            EnvRunnersLost: every runner has used up its restarts, or none came back in time.
        """
        deadline = time.perf_counter() + self.timeout_s
        while not self.restore():
            n = len(self.ids)
            if not self._restartable():
                raise EnvRunnersLost(
                    f"all {n} env runners are lost and none can be restarted (env_runner_restarts="
                    f"{self.budget} per runner, used up); the run stops."
                )
            if time.perf_counter() > deadline:
                raise EnvRunnersLost(
                    f"all {n} env runners are lost and none came back within env_runner_restart_timeout_s="
                    f"{self.timeout_s:g} s; the run stops."
                )
            time.sleep(POLL_S)

    def close(self) -> None:
        """Before RLlib stops the runners: end the lost ones (dead, or being restarted) and take
        them out of its pool, whose ``stop`` would call them and log their errors."""
        for i in list(self.down_since):
            ray.kill(self.manager.remove_actor(i), no_restart=True)

    def metrics(self) -> Dict[str, float]:
        """``runners_healthy`` now, and the runners ``runners_lost`` / ``runners_restored`` so far."""
        return {
            "runners_healthy": float(len(self._healthy())),
            "runners_lost": float(self.lost),
            "runners_restored": float(self.restored),
        }
