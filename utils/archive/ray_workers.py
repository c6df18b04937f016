"""Workers past one machine: a pool of Ray actors, each compiling one pipeline, fed one page at a time.

Ray is imported here only. With no address (and no `RAY_ADDRESS`), Ray starts on this machine with the CPUs
the actors need, no dashboard and a small object store; with an address (`ray start --head` printed it, or
`auto`), the actors are placed on that cluster, where every node must see the model folders and the archive at
the same paths (a shared file system) and this repository's `utils` package is shipped to the workers. A Ray
started by the caller is used as it is: its workers must import `utils` (`start_local_ray` sees to it, or run
from the repository's root, or set `PYTHONPATH`). The driver stays the single writer. An actor that dies (killed,
its node lost) has its page handed to the others; only when every actor is gone does `read` raise `WorkersLost`.
A cluster's address is checked first (`check_ray_address`): where nothing answers within a few seconds as a Ray
cluster's gRPC server does, the run stops with one line naming the address, rather than waiting on Ray's own
retries.
"""

from __future__ import annotations

import logging
import os
import socket
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path

from utils.archive.pages import PageTask
from utils.archive.reader import PageReader, ReadSettings
from utils.archive.workers import WorkersLost, WorkerStartFailed, available_cores, threads_per_worker

__all__ = ["LOCAL_OBJECT_STORE_BYTES", "CONNECT_SECONDS", "check_ray_address", "start_local_ray", "RayWorkers"]

LOCAL_OBJECT_STORE_BYTES = 128 * 2**20  # records are small: a local Ray needs no share of the RAM for objects
CONNECT_SECONDS = 5.0  # how long a cluster's address may take to accept a connection
_UTILS = Path(__file__).resolve().parent.parent
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_HTTP2_SETTINGS_TYPE = 0x4
_HTTP2_EMPTY_SETTINGS = bytes([0, 0, 0, _HTTP2_SETTINGS_TYPE, 0, 0, 0, 0, 0])  # length 0, type, flags, stream 0


def check_ray_address(address: str | None) -> None:
    """Raises ValueError, within `CONNECT_SECONDS`, when nothing accepts a connection at the Ray cluster `address`
    (None: `$RAY_ADDRESS`, if set). No address, or `auto` (Ray finds a cluster started on this machine), is not
    checked. Ray is not imported: an address where nothing listens would have it retry for minutes."""
    given = address or os.environ.get("RAY_ADDRESS") or ""
    if given in ("", "auto"):
        return
    named = given if address else f"$RAY_ADDRESS={given}"
    host, _, port = given.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"Ray address {named} is not HOST:PORT (or ray://HOST:PORT, or auto)")
    advice = "start one there with `ray start --head`, or give --ray no address to start Ray on this machine"
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_SECONDS) as connection:
            speaks_grpc = _answers_http2(connection)
    except OSError as error:
        raise ValueError(f"no Ray cluster answers at {named} ({error.strerror or error}); {advice}") from None
    if not speaks_grpc:
        raise ValueError(f"no Ray cluster answers at {named}: something listens there, but not Ray (it does not "
                         f"answer as a gRPC server within {CONNECT_SECONDS:g} s); {advice}")


def _answers_http2(connection: socket.socket) -> bool:
    """Whether the server at the other end answers an HTTP/2 client preface with its SETTINGS frame, as the gRPC
    servers of a Ray cluster (its GCS, or the Ray Client server of a `ray://` address) do. A cluster with TLS
    (`RAY_USE_TLS`) is not probed. A server that says nothing would have Ray retry for minutes."""
    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        return True
    connection.sendall(_HTTP2_PREFACE + _HTTP2_EMPTY_SETTINGS)
    header = b""
    try:
        while len(header) < 9:
            chunk = connection.recv(9 - len(header))
            if not chunk:
                return False
            header += chunk
    except TimeoutError:
        return False
    return header[3] == _HTTP2_SETTINGS_TYPE


def start_local_ray(cpus: int | None = None) -> None:
    """Starts Ray on this machine as archives use it: `cpus` CPUs (default: this process's cores), no dashboard,
    a small object store, quiet logs, and workers that import `utils` from this repository by its path."""
    import ray

    before = os.environ.get("PYTHONPATH")
    # Ray's processes inherit this environment: its prestarted workers can import `utils` (a runtime_env would give
    # each actor a worker process of its own, started on demand: 1-2 s more per actor)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_UTILS.parent), before]))
    try:
        ray.init(num_cpus=cpus or available_cores(), object_store_memory=LOCAL_OBJECT_STORE_BYTES,
                 include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before


class _ActorReader:
    """The body of one actor: a `PageReader`, or why it could not be built (told at the first page)."""

    def __init__(self, settings: ReadSettings, threads: int):
        try:
            self.reader, self.error = PageReader(settings, threads=threads), ""
        except (ValueError, OSError) as error:
            self.reader, self.error = None, str(error)

    def read(self, task: PageTask) -> dict:
        if self.reader is None:
            raise WorkerStartFailed(self.error)
        return self.reader.read(task)


class RayWorkers:
    """`count` Ray actors reading pages; `address` None: local Ray (or the cluster `RAY_ADDRESS` names).

    Args:
        settings: how each page is read.
        count: actors.
        address: a Ray cluster's address (`HOST:PORT`, `ray://HOST:PORT` or `auto`), or None.
    """

    def __init__(self, settings: ReadSettings, count: int, *, address: str | None = None):
        import ray

        self.ray = ray
        local = address is None and not os.environ.get("RAY_ADDRESS")
        self.threads = threads_per_worker(count) if local else 1
        self.started_ray = not ray.is_initialized()
        if self.started_ray and local:
            start_local_ray(count * self.threads)
        elif self.started_ray:  # the workers import `utils` shipped by Ray
            try:
                ray.init(address=address, runtime_env={"py_modules": [str(_UTILS)], "excludes": ["__pycache__"]},
                         logging_level=logging.ERROR, log_to_driver=False)
            except ConnectionError as error:  # e.g. `auto` with no cluster on this machine
                raise ValueError(f"Ray at {address or os.environ['RAY_ADDRESS']} could not be joined: "
                                 f"{str(error).splitlines()[0]}") from None
        actor = ray.remote(num_cpus=self.threads)(_ActorReader)
        self.actors = [actor.remote(settings, self.threads) for _ in range(count)]
        self.running: dict = {}  # object ref of a page's record -> (actor, task)

    def read(self, tasks: Iterable[PageTask]) -> Iterator[tuple[PageTask, dict]]:
        ray, queue, idle = self.ray, deque(tasks), list(self.actors)
        while queue or self.running:
            while queue and idle:
                actor, task = idle.pop(), queue.popleft()
                self.running[actor.read.remote(task)] = actor, task
            (ready,), _ = ray.wait(list(self.running), num_returns=1)
            actor, task = self.running.pop(ready)
            try:
                record = ray.get(ready)
            except ray.exceptions.RayActorError:
                self.actors.remove(actor)
                queue.appendleft(task)  # the others read it
                if not self.actors:
                    raise WorkersLost("every Ray actor died") from None
                continue
            except ray.exceptions.RayTaskError as error:
                if isinstance(error.cause, WorkerStartFailed):
                    raise error.cause from None
                raise
            idle.append(actor)
            yield task, record

    def close(self) -> None:
        for actor in self.actors:
            self.ray.kill(actor)
        self.actors, self.running = [], {}
        if self.started_ray:
            self.ray.shutdown()
