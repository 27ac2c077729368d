"""Engine actors on Ray: placement options, start-up, liveness after a failure, and their counters.

One actor per accelerator host (all `TPU` chips of a host, or a GPU share), or on CPU one per
configured share; Ray restarts a dead actor up to `engine.max_restarts` times.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

from memloop.eval.llm import Usage
from memloop.jobs.errors import RunError, error_text
from memloop.jobs.run.config import EngineSpec

Log = Callable[[str], None]


def actor_options(engine: EngineSpec) -> dict[str, Any]:
    """Ray options of one engine actor: a whole TPU host, a GPU share, or a CPU share."""
    opts: dict[str, Any] = {
        "max_restarts": engine.max_restarts,
        "max_task_retries": 0,
        "num_cpus": engine.cpus_per_actor,
    }
    if engine.accelerator == "tpu":
        opts["resources"] = {"TPU": float(engine.tpu_chips_per_host)}  # all chips of a host: one actor per host
        if engine.tpu_slice:  # keep every actor on the hosts of one slice (Ray labels TPU hosts by slice)
            opts["label_selector"] = {"ray.io/tpu-slice-name": engine.tpu_slice}
    elif engine.accelerator == "gpu":
        opts["num_gpus"] = engine.gpus_per_actor
    return opts


def default_actor_class() -> Any:
    from memloop.engine.serve.actor import EngineActor

    return EngineActor


def quiet_private_auth() -> None:
    """Name Ray's authentication mode for a private local instance: token authentication, which Ray
    turns on by default anyway, but set explicitly (RAY_AUTH_MODE=token) so Ray does not print its
    "Token authentication is enabled ... Set RAY_AUTH_MODE=disabled to opt out" WARNING on every run.
    A mode the user set is kept; a cluster being joined keeps its own (its mode must match)."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    os.environ["RAY_AUTH_MODE"] = "token"
    import sys

    if "ray._raylet" in sys.modules:  # Ray read its config when imported: refresh it, as Ray does itself when
        from ray._raylet import Config  # it turns token mode on (authentication_token_setup._enable_token_auth)

        Config.initialize("")


RAY_JOIN_TIMEOUT_S = 5.0  # how long a given Ray address may take to accept a connection


def ensure_ray(log: Log, address: str | None = None) -> None:
    """Start Ray for this process: a private local instance, unless an address is given (`address`, else
    `RAY_ADDRESS`). Never the host's last `ray start` (Ray's default without an address reads
    `ray_current_cluster`, which may name a dead cluster, or a live one that is not this run's)."""
    import ray

    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is not None and address != "local":
        _check_joinable(address)
    else:
        quiet_private_auth()
    try:
        ray.init(
            address=address or "local", include_dashboard=False, log_to_driver=bool(address), logging_level="WARNING"
        )
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise RunError(
            f"cannot join the Ray cluster at {address}: {type(exc).__name__}: {str(exc)[:300]}; "
            "check RAY_ADDRESS (or --address), or unset it to run on a private local instance"
        ) from None
    no_implicit_ray()
    from memloop.jobs.run.signals import reassert

    reassert()  # Ray's own SIGTERM handler exits at once; a run stops cleanly instead
    log(
        f"ray: {'connected to ' + address if address else 'a private local instance'}; "
        f"resources {ray.cluster_resources()}"
    )


def no_implicit_ray() -> None:
    """Ray starts a new local instance on any `.remote()` made while it is not initialized; after this
    process shut its Ray down (a stop), a lane finishing its unit would start a second one, whose
    agents outlive the run. From now on such a call raises instead."""
    import ray._private.auto_init_hook as auto_init

    auto_init.enable_auto_connect = False


def _check_joinable(address: str) -> None:
    """Raise RunError within seconds when nothing answers at `address` (Ray itself retries for minutes)."""
    import socket

    from ray._private.services import canonicalize_bootstrap_address

    target = address.split("://", 1)[1] if "://" in address else address
    try:
        resolved = target if "://" in address else canonicalize_bootstrap_address(target)
    except Exception as exc:  # "auto" with no instance found, a malformed address
        raise RunError(
            f"Ray address {address!r}: {str(exc)[:300]}; give host:port of a running cluster, or unset "
            "RAY_ADDRESS to run on a private local instance"
        ) from None
    if resolved is None:  # "auto" found nothing to join
        raise RunError(
            f"Ray address {address!r}: no running Ray cluster was found on this host; start one "
            "(`ray start --head`) or unset RAY_ADDRESS to run on a private local instance"
        )
    host, _, port = resolved.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=RAY_JOIN_TIMEOUT_S):
            pass
    except (OSError, ValueError) as exc:
        raise RunError(
            f"cannot join the Ray cluster at {address}: nothing answers at {resolved} "
            f"({getattr(exc, 'strerror', None) or exc}); start it, fix RAY_ADDRESS (or --address), "
            "or unset it to run on a private local instance"
        ) from None


def start_actors(
    engine: EngineSpec, actor_cls: Any, kwargs: dict[str, Any], log: Log, name_prefix: str | None = None
) -> list[Any]:
    """Start `engine.actors` actors and wait until each answers `health()`."""
    import ray

    remote_cls = actor_cls if hasattr(actor_cls, "remote") else ray.remote(actor_cls)
    opts = actor_options(engine)
    # Named after the run: `ray list actors` shows whose engines they are, and a second driver of the
    # same run on the same cluster fails at once instead of computing everything twice.
    actors = [
        remote_cls.options(name=f"{name_prefix}engine-{i}", **opts).remote(**kwargs)
        if name_prefix
        else remote_cls.options(**opts).remote(**kwargs)
        for i in range(engine.actors)
    ]
    pending = [a.health.remote() for a in actors]
    config = kwargs.get("config")  # an EngineConfig (a run plan's) or a dict of its fields
    model = config.get("model") if isinstance(config, dict) else getattr(config, "model", None)
    log(f"engine: starting {len(actors)} actor(s): loading weights{f' ({model})' if model else ''}")
    ready, not_ready = _wait_started(pending, engine.start_timeout_s, log)
    if not_ready:
        for a in actors:
            ray.kill(a)
        raise RunError(
            f"{len(not_ready)} of {len(actors)} engine actors did not start within {engine.start_timeout_s:.0f} s "
            f"(each asks {opts}; the cluster has {ray.cluster_resources()}): lower `engine.actors` or add hosts"
        )
    try:
        ray.get(ready)  # raises the constructor's error, if any
    except Exception as exc:
        for a in actors:
            ray.kill(a)
        raise RunError(f"the engine did not start: {error_text(exc)}") from None
    log(f"engine: {len(actors)} actor(s) ready ({opts})")
    return actors


START_REPORT_S = 15.0  # how often a slow engine start says where it is


def _wait_started(pending: list[Any], timeout_s: float, log: Log) -> tuple[list[Any], list[Any]]:
    """`ray.wait` for every actor's first answer, with a line every START_REPORT_S seconds saying how many
    are up (loading weights takes a minute or more on a loaded host; silence reads as a hang)."""
    import ray

    t0 = time.monotonic()
    ready: list[Any] = []
    while pending:
        left = timeout_s - (time.monotonic() - t0)
        if left <= 0:
            break
        done, pending = ray.wait(pending, num_returns=len(pending), timeout=min(START_REPORT_S, left))
        ready += done
        if pending:
            log(
                f"engine: loading weights: {len(ready)} of {len(ready) + len(pending)} actor(s) up, "
                f"{time.monotonic() - t0:.0f} s"
            )
    return ready, pending


def wait_restarted(actor: Any, timeout_s: float, stop: Callable[[], bool] = lambda: False) -> bool:
    """After an actor error: wait for Ray's restart; False if the actor is gone for good."""
    import ray
    from ray.exceptions import ActorDiedError, GetTimeoutError

    deadline = time.monotonic() + timeout_s
    died = 0
    while time.monotonic() < deadline and not stop():
        try:
            return bool(ray.get(actor.health.remote(), timeout=max(1.0, deadline - time.monotonic())))
        except ActorDiedError:  # dead for good once it persists (no restarts left)
            died += 1
            if died >= 5:
                return False
        except (ray.exceptions.RayActorError, GetTimeoutError):  # restarting (model load): ask again
            died = 0
        time.sleep(1.0)
    return False


def live_state(actors: list[Any], fallback: Usage) -> tuple[Usage, str]:
    """Engine-wide counters (live, also mid-unit) and what the engines are doing, in words: the shapes
    compiled so far and the seconds spent compiling (a new engine compiles a program per batch and length
    bucket the first time it meets one, which is where the first minutes of a run go), the sequences
    running. `fallback` and "" when an actor does not answer."""
    import ray

    if not actors:
        return fallback, ""
    try:
        stats = ray.get([a.stats.remote() for a in actors], timeout=5)
    except Exception:
        return fallback, ""
    usage = Usage(
        sum(s.get("prompt_tokens", 0) for s in stats),
        sum(s.get("cached_tokens", 0) for s in stats),
        sum(s.get("decoded_tokens", 0) for s in stats),
    )
    shapes = sum(int(s.get("compiled_shapes", 0)) for s in stats)
    compile_s = sum(float(s.get("compile_s", 0.0)) for s in stats)
    running = sum(int(s.get("running", 0)) for s in stats)
    return usage, (
        f"engines: {len(stats)} up, {shapes} shape(s) compiled ({compile_s:.0f} s compiling), "
        f"{running} sequence(s) running"
    )


def engine_stats(actors: list[Any]) -> list[dict[str, Any]]:
    import ray

    out = []
    for i, a in enumerate(actors):
        try:
            out.append(dict(ray.get(a.stats.remote(), timeout=30), actor=f"engine-{i}"))
        except Exception as exc:
            out.append({"actor": f"engine-{i}", "error": error_text(exc)})
    return out
