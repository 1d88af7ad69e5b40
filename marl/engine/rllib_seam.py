"""The one seam between marl and RLlib's private API.

marl runs on RLlib's public engine (``Algorithm``, ``EnvRunnerGroup``, ``LearnerGroup``,
``TorchLearner``, ``RLModule``). A few things marl needs are only reachable through names
RLlib keeps private (a leading ``_``) or under ``ray._private``. Every such use lives in this
module, behind a public name of marl's, so that an RLlib upgrade breaks (and is mended) here
and nowhere else; ``tests/test_rllib_seam.py`` fails when any other file of the repository
touches an RLlib private name.

Supported RLlib: ``ray[rllib]`` 2.60.x (``setup.py`` pins ``ray[rllib]==2.60.*``; docs/engine.md).

What is used, and why:

==========================================  ==========================================================
RLlib private name                          why marl needs it (public wrapper here)
==========================================  ==========================================================
``Learner._update(batch)``                  one gradient step (forward, loss, backward, clip, apply) on
                                            a minibatch marl cut itself; the public ``Learner.update``
                                            re-slices and shuffles each module's rows on its own, which
                                            would split the agents of one env step
                                            (:meth:`SeamLearner.gradient_step`)
``Learner._check_is_built``,                the opening of ``Learner.update`` that marl's own ``update``
``Learner._convert_batch_type``,            overrides repeat: built check, numpy -> torch on the
``Learner._weights_seq_no``                 learner's device, the weights' version number that env
                                            runners compare (:meth:`SeamLearner.begin_update`)
``Learner._module``                         the module *before* DDP wrapping, whose parameters the
                                            optimizer must hold (:meth:`SeamLearner.module_for_optimizer`)
``TorchLearner._optimizer_parameters``,     the LLM learner's own micro-batched step: zero the grads
``TorchLearner._params``                    of every optimizer and read every parameter by id
                                            (:meth:`SeamLearner.zero_grads`, :attr:`SeamLearner.params_by_id`)
``TorchLearner._get_optimizer_state``,      RLlib converts optimizer state to numpy, which has no
``TorchLearner._named_optimizers``,         bfloat16; the LLM learner saves it itself
``Learner._optimizer_name_to_module``       (:meth:`SeamLearner.optimizer_state`, :meth:`SeamLearner.named_optimizers`)
``Checkpointable._check_component``,        whether ``get_state`` was asked for a component, and the
``Checkpointable._get_subcomponents``       sub-components of one (:func:`wants_component`, :func:`subcomponents`)
``EnvRunnerGroup._worker_manager``          the ``FaultTolerantActorManager`` of the remote env runners:
                                            their ids and actor handles, calls to healthy ones
                                            (:func:`runner_manager`, :func:`runner_actors`)
``LearnerGroup._learner``                   the local learner of a group without remote learners, for
                                            tests and single-process tools (:func:`local_learner`)
``Learner._update`` (wrapped)               the RLlib anchor benchmark counts the stock PPO learner's
                                            minibatch steps (:func:`count_gradient_steps`)
``ray._private.ray_constants``,             ``ENABLE_RAY_CLUSTER`` and ``ray.init``'s ``_node_ip_address``:
``ray.init(_node_ip_address=...)``          Ray 2.60 binds a local node to every interface unless its
                                            single-machine mode is on when the node starts
                                            (:func:`init_loopback_ray`)
``ray._private.authentication``             Ray writes the cluster's auth token to ``~/.ray/auth_token``
``.authentication_token_setup``             with the process umask (0644); marl writes it 0600
                                            (:func:`init_loopback_ray`, :func:`private_token_file`)
``Trainable._setup_logdir``                 every ``Algorithm`` makes a folder in ``~/ray_results``, which
                                            Ray makes world-writable (0777); marl's trainers use their run
                                            folder or a private temporary one (:class:`PrivateLogdir`)
``ray.rllib.utils.checkpoints.pickle``      the unpickler RLlib reads checkpoint state with; marl swaps
                                            in its allowlisting one while it restores
                                            (:func:`checkpoint_unpickling`)
==========================================  ==========================================================

RLModule's ``_forward``, ``_forward_train``, ``_forward_inference`` and ``_forward_exploration`` are
RLlib's documented override points (its RLModule guide), not private API, and are used everywhere.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

import torch
from ray.rllib.core.learner.torch.torch_learner import TorchLearner

RLLIB_VERSIONS = ">=2.60,<2.61"  # the ray[rllib] releases this module was written and tested against


class SeamLearner(TorchLearner):
    """Base of marl's learners: RLlib's ``TorchLearner`` with its private parts under public names."""

    def module_for_optimizer(self, module_id: str) -> Any:
        """The RLModule ``module_id`` before any DDP wrapping (what an optimizer must hold)."""
        module = self._module
        assert module is not None, "the learner's module is built in Learner.build()"
        return module[module_id]

    def clip_groups(self, module_id: str) -> Optional[Dict[str, Set[Any]]]:
        """Parameter groups whose gradients are clipped each by its own global norm (name -> parameters);
        parameters in no group form the group ``rest``. ``None`` (default): RLlib's clipping, one global
        norm per optimizer."""
        return None

    def groups_by_head(
        self, module_id: str, heads: Dict[str, str], default: Optional[str] = None
    ) -> Dict[str, Set[Any]]:
        """Clip groups of module ``module_id``'s trainable parameters (frozen targets and statistics left out)
        by the first part of their names: ``heads`` maps a name's head (``critic`` of ``critic.0.weight``) to
        its group; a parameter under another head goes to ``default``, or with ``default=None`` to a group
        named after its head (e.g. an actor and a critic trained by one optimiser, each clipped as its own
        optimiser would, and a temperature on its own). Made once per module: a built module keeps its
        parameter tensors (a restore copies into them)."""
        key = (module_id, tuple(sorted(heads.items())), default)
        cache: Dict[Any, Dict[str, Set[Any]]] = self.__dict__.setdefault("_head_groups", {})
        if key not in cache:
            groups: Dict[str, Set[Any]] = {g: set() for g in heads.values()}
            for name, p in self.module_for_optimizer(module_id).named_parameters():
                if p.requires_grad:
                    head = name.split(".")[0]
                    groups.setdefault(heads.get(head, default or head), set()).add(p)
            cache[key] = groups
        return cache[key]

    def postprocess_gradients_for_module(
        self, *, module_id: Any, config: Any = None, module_gradients_dict: Any
    ) -> Any:
        """RLlib's gradient clipping, or with :meth:`clip_groups` one global-norm clip per group to
        ``config.grad_clip`` (each group's norm logged as ``gradients_<group>_global_norm``)."""
        groups = self.clip_groups(module_id)
        if groups is None or not config.grad_clip:
            return super().postprocess_gradients_for_module(
                module_id=module_id, config=config, module_gradients_dict=module_gradients_dict
            )
        named = set().union(*groups.values())
        groups = {**groups, "rest": {k for k in module_gradients_dict if k not in named}}
        clip = self._get_clip_function()
        for name, members in groups.items():
            part = {k: g for k, g in module_gradients_dict.items() if k in members}
            if part:  # the clip scales the tensors in place
                norm = clip(part, grad_clip=config.grad_clip, grad_clip_by="global_norm")
                self.metrics.log_value((module_id, f"gradients_{name}_global_norm"), norm, window=1)
        return dict(module_gradients_dict)

    def apply_gradients(self, gradients_dict: Any) -> None:
        """RLlib's ``apply_gradients`` with one host sync for the finite check of every gradient (RLlib checks
        each parameter's gradient twice, two syncs each: about a tenth of an off-policy gradient step of 128
        transitions on one CPU thread). All finite (the norm of each, ``torch._foreach_norm``, finite): set them
        and step every optimizer, as RLlib does. Otherwise, or with RLlib's torch LR schedulers or gradient
        scalers, RLlib's own path, which warns and zeroes the non-finite values."""
        grads = list(gradients_dict.values())
        if not grads or self._lr_scheduler_classes is not None or self._grad_scalers is not None:
            return super().apply_gradients(gradients_dict)
        if not bool(torch.isfinite(torch.stack(torch._foreach_norm(grads))).all()):
            return super().apply_gradients(gradients_dict)
        for pid, grad in gradients_dict.items():
            self._params[pid].grad = grad
        for module_id, names in self._module_optimizers.items():
            for name in names:
                self.get_optimizer(module_id, name).step()
        return None

    def begin_update(self, batch: Any, training_data: Any, timesteps: Any) -> Dict[str, Dict[str, Any]]:
        """The opening of an ``update`` override: resolve ``training_data``, run RLlib's
        pre-update hook, convert the ``MultiAgentBatch`` to tensors on the learner's device
        and bump the weights' version. Returns module id -> column dict."""
        self._check_is_built()
        if training_data is not None:
            training_data.solve_refs()
            batch = training_data.batch
        self.before_gradient_based_update(timesteps=timesteps or {})
        batch = self._convert_batch_type(batch)
        self._weights_seq_no += 1
        return {mid: dict(b) for mid, b in batch.policy_batches.items()}

    def gradient_step(self, batch: Dict[str, Any]) -> Any:
        """One gradient step on ``batch`` (module id -> columns): ``forward_train``,
        ``compute_losses``, backward, gradient clipping, optimizer step."""
        return self._update(batch)

    def zero_grads(self) -> None:
        """Zero (to ``None``) the gradients of every registered optimizer."""
        for opt in self._optimizer_parameters:
            opt.zero_grad(set_to_none=True)

    @property
    def params_by_id(self) -> Dict[Any, Any]:
        """Parameter id -> parameter, as ``apply_gradients`` expects its gradient dict."""
        return self._params

    def named_optimizers(self) -> List[Tuple[str, str, Any]]:
        """``(optimizer name, module id, optimizer)`` of every registered optimizer."""
        return [(name, self._optimizer_name_to_module[name], opt) for name, opt in self._named_optimizers.items()]

    def optimizer_state(self) -> Dict[str, Any]:
        """The optimizers' state saved in checkpoints (RLlib's numpy conversion by default)."""
        return TorchLearner._get_optimizer_state(self)

    def _get_optimizer_state(self) -> Dict[str, Any]:  # RLlib's hook, routed to the public method above
        return self.optimizer_state()


def wants_component(obj: Any, name: str, components: Any, not_components: Any) -> bool:
    """Whether ``obj.get_state(components, not_components=...)`` asks for component ``name``."""
    return obj._check_component(name, components, not_components)


def subcomponents(obj: Any, name: str, components: Any) -> Any:
    """The part of ``components`` that names sub-components of ``name`` (RLlib's ``a/b`` paths)."""
    return obj._get_subcomponents(name, components)


def runner_manager(env_runner_group: Any) -> Any:
    """The ``FaultTolerantActorManager`` of an ``EnvRunnerGroup``'s remote env runners."""
    return env_runner_group._worker_manager


def runner_actors(env_runner_group: Any) -> Dict[int, Any]:
    """Remote env runner id (1-based) -> Ray actor handle."""
    return env_runner_group._worker_manager.actors()


def local_learner(learner_group: Any) -> Any:
    """The learner of a ``LearnerGroup`` without remote learners (``num_learners=0``); else ``None``."""
    return getattr(learner_group, "_learner", None)


def count_gradient_steps(learner: Any, on_step: Callable[[Any], None]) -> None:
    """Call ``on_step(batch)`` before each gradient step of any RLlib learner (marl's or RLlib's
    stock ones, whose ``update`` cuts minibatches itself); for the RLlib anchor benchmark."""
    step = learner._update

    def counted(batch: Any, *args: Any, **kwargs: Any) -> Any:
        on_step(batch)
        return step(batch, *args, **kwargs)

    learner._update = counted


def init_loopback_ray(**init_kwargs: Any) -> None:
    """``ray.init(**init_kwargs)`` with every server of the new node bound to the loopback address.

    Ray 2.60 resolves a loopback node address to the machine's external IP (and its servers then
    listen on every interface) unless its single-machine mode is on; that mode is read from
    ``ray_constants.ENABLE_RAY_CLUSTER`` when the node starts, and the address from ``ray.init``'s
    ``_node_ip_address``.

    The auth token a new cluster makes is written readable by its owner only (0600, in a 0700
    ``~/.ray``); a token file an earlier run left readable by others is made private too
    (:func:`private_token_file`).
    """
    import ray
    from ray._private import ray_constants
    from ray._private.authentication import authentication_token_setup as token_setup

    multi_node, write_token = ray_constants.ENABLE_RAY_CLUSTER, token_setup.generate_and_save_token
    ray_constants.ENABLE_RAY_CLUSTER = False
    token_setup.generate_and_save_token = _save_private_token
    try:
        ray.init(_node_ip_address="127.0.0.1", **init_kwargs)
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = multi_node
        token_setup.generate_and_save_token = write_token
    private_token_file()


def token_path() -> Path:
    """Where Ray keeps the auth token it makes for a new local cluster (``~/.ray/auth_token``)."""
    from ray._private.authentication.authentication_token_setup import _get_default_token_path

    return _get_default_token_path()


def _save_private_token() -> None:
    """Ray's ``generate_and_save_token``, creating the file with mode 0600 from the start."""
    from ray._private.authentication.authentication_token_generator import generate_new_authentication_token

    path = token_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(generate_new_authentication_token())


def private_token_file() -> None:
    """Make Ray's token file 0600 and its folder 0700 where this user owns them (a token made by
    Ray itself, or by an earlier marl, is 0644)."""
    path = token_path()
    for p, mode in ((path.parent, 0o700), (path, 0o600)):
        try:
            if p.exists() and p.stat().st_uid == os.getuid():
                os.chmod(p, mode)
        except OSError:  # a read-only home: nothing marl can change
            pass


class PrivateLogdir:
    """Mixin for an ``Algorithm`` subclass (before ``Algorithm`` in the bases): its Trainable log folder
    is ``self.run_dir`` when set, else a new private (0700) temporary folder, never a folder under
    ``~/ray_results`` (which Ray makes world-writable, 0777)."""

    run_dir: Any = None

    def _setup_logdir(self) -> None:
        run_dir = getattr(self, "run_dir", None)
        logdir = str(run_dir) if run_dir is not None else tempfile.mkdtemp(prefix="marl-rllib-")
        trainable: Any = self  # Trainable's attribute, typed there (None until set up), not in this mixin
        trainable._logdir = logdir


@contextmanager
def checkpoint_unpickling(load: Callable[[Any], Any]) -> Iterator[None]:
    """While the block runs, RLlib reads checkpoint pickles in this process with ``load(file)``
    (e.g. :func:`marl.safe_pickle.safe_load`) instead of ``pickle.load``; writing is unchanged."""
    from ray.rllib.utils import checkpoints

    real = checkpoints.pickle

    class _Pickle:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        @staticmethod
        def load(f: Any, *args: Any, **kwargs: Any) -> Any:
            return load(f)

    checkpoints.pickle = _Pickle()  # type: ignore[assignment]
    try:
        yield
    finally:
        checkpoints.pickle = real
