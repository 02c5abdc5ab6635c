"""Chatterbox on Ray Serve: ``chatterbox serve``'s OpenAI-compatible API (``/v1/audio/speech``
with whole files, chunked audio streams and SSE; ``/v1/voices``, ``/v1/models``) behind Ray
Serve's HTTP proxy, one replica per GPU (or per group of CPUs), the replica count driven by
Ray's autoscaler on the requests queued and running.

Each replica runs ``chatterbox serve`` (this package's command) as a child process on
127.0.0.1 and an ephemeral port, and forwards every request to it, streaming the answer back
as it comes: formats, SSE events, voices, errors (status codes and OpenAI error bodies), limits
and 429s are exactly the server's. Ray's health check is the server's ``/ready`` (503 while
loading, draining or once a device has failed: Serve then replaces the replica). When Serve
stops a replica it first lets the requests routed to it finish (``graceful_shutdown_timeout_s``),
then the server gets SIGTERM and drains what is left. The child dies with its replica's
process (``PR_SET_PDEATHSIG`` on Linux), so a lost node leaves no server behind.

Replicas given the same ``--voices`` directory (a shared file system) share one voice library.

    # one replica per GPU, 1 to 8 of them, on a running Ray cluster (ray start ...)
    serve run chatterbox_rs.serve:app_builder \\
        args="--model turbo --voices /shared/voices" num_gpus=1 max_replicas=8

    # or from Python
    from ray import serve
    from chatterbox_rs.serve import app
    serve.run(app(["--model", "turbo"], num_gpus=1, max_replicas=8), route_prefix="/")

Needs the ``serve`` extra: ``pip install 'chatterbox-rs[serve]'`` (Ray Serve).
"""
import asyncio
import collections
import ctypes
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import aiohttp
import ray
from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

__all__ = ["ChatterboxServer", "app", "app_builder"]

# Headers of one HTTP hop, not forwarded either way.
_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "trailers", "transfer-encoding", "upgrade", "host",
}
# Options this deployment sets itself on the child server.
_OWN = {"--host", "--port"}


def _die_with_parent():
    """In the child before exec: SIGKILL when the thread that started it (the keeper thread,
    alive as long as the replica's process) goes away."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _server_args(args):
    """`chatterbox serve`'s options as a list (a string is split as a shell would)."""
    if isinstance(args, str):
        args = shlex.split(args)
    args = [str(a) for a in args]
    for a in args:
        if a.split("=", 1)[0] in _OWN:
            raise ValueError(f"{a}: the deployment chooses the server's address itself")
    return args


def _upstream_headers(headers):
    """The server's response headers as the proxy should send them: hop-by-hop ones and `date`
    left out (the proxy sets its own), the server's `x-request-id` (its log lines' id) renamed
    `x-chatterbox-request-id` beside the proxy's."""
    out = []
    for k, v in headers.items():
        k = k.lower()
        if k in _HOP or k == "date":
            continue
        out.append(("x-chatterbox-request-id" if k == "x-request-id" else k, v))
    return out


def _error(status, message, code):
    """An OpenAI error body, as the server's."""
    return JSONResponse(
        {"error": {"message": message, "type": "server_error", "param": None, "code": code}},
        status_code=status,
    )


class _Child:
    """``chatterbox serve`` on 127.0.0.1:0, its standard error echoed (prefixed) to ours."""

    def __init__(self, argv, env, ready_timeout_s):
        self.argv = argv
        self.lines = collections.deque(maxlen=40)
        self.base = None
        self.proc = None
        self._bound = threading.Event()
        self._started = threading.Event()
        self._spawn_error = None
        # The keeper thread starts the child and lives until it exits: PR_SET_PDEATHSIG
        # follows the thread that forked, so the child outlives no replica.
        self._keeper = threading.Thread(target=self._keep, args=(env,), daemon=True,
                                        name="chatterbox-serve")
        self._keeper.start()
        self._started.wait()
        if self._spawn_error is not None:
            raise RuntimeError(f"cannot start {argv[0]}: {self._spawn_error}")
        deadline = time.monotonic() + ready_timeout_s
        while not self._bound.wait(0.1):
            self._check_alive()
            if time.monotonic() > deadline:
                self.kill()
                raise TimeoutError(f"chatterbox serve printed no address in {ready_timeout_s} s")
        while True:
            self._check_alive()
            if self.ready(timeout=5.0)[0] == 200:
                return
            if time.monotonic() > deadline:
                self.kill()
                raise TimeoutError(f"chatterbox serve was not ready in {ready_timeout_s} s")
            time.sleep(0.2)

    def _keep(self, env):
        try:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, env=env,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        except OSError as e:
            self._spawn_error = e
            self._started.set()
            return
        self._started.set()
        marker = "listening on http://"
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            self.lines.append(line)
            print(f"[chatterbox serve] {line}", file=sys.stderr, flush=True)
            if self.base is None and marker in line:
                rest = line[line.index(marker) + len("listening on "):]
                self.base = rest.split()[0].rstrip(",;")
                self._bound.set()
        self.proc.wait()

    def _check_alive(self):
        if self.proc.poll() is not None:
            tail = "\n".join(self.lines)
            raise RuntimeError(
                f"chatterbox serve exited with status {self.proc.returncode}:\n{tail}")

    def ready(self, timeout):
        """(status, body) of GET /ready; (0, why) when it does not answer."""
        try:
            with urllib.request.urlopen(self.base + "/ready", timeout=timeout) as r:
                return r.status, r.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode("utf-8", "replace")
        except OSError as e:
            return 0, str(e)

    def stop(self, drain_s):
        """SIGTERM (the server drains: requests in flight finish), SIGKILL after `drain_s`."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=drain_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class ChatterboxServer:
    """The replica: a ``chatterbox serve`` child and a streaming forwarder to it.

    ``args``: ``chatterbox serve``'s options (a list, or one string split as a shell would),
    less ``--host`` and ``--port`` (the child listens on 127.0.0.1 and a free port). Without
    ``--device`` the replica serves the GPUs Ray gave it (``cuda:0``.. of its
    ``CUDA_VISIBLE_DEVICES``), else the CPU. ``env``: variables for the child (on top of the
    replica's environment). ``command``: the command to run instead of this package's
    ``chatterbox`` (a list or a string split as a shell would, e.g. a CUDA build's binary);
    ``serve`` and the options follow it.
    """

    def __init__(self, args=(), env=None, command=None, ready_timeout_s=600.0,
                 drain_timeout_s=30.0):
        args = _server_args(args)
        if not any(a == "--device" or a.startswith("--device=") for a in args):
            gpus = ray.get_gpu_ids()
            if gpus:
                for i in range(len(gpus)):
                    args += ["--device", f"cuda:{i}"]
            else:
                args += ["--device", "cpu"]
        child_env = dict(os.environ)
        child_env.update({k: str(v) for k, v in (env or {}).items()})
        if command is None:
            command = [sys.executable, "-m", "chatterbox_rs._cli"]
        elif isinstance(command, str):
            command = shlex.split(command)
        argv = [*command, "serve", *args, "--host", "127.0.0.1", "--port", "0"]
        self._drain_s = float(drain_timeout_s)
        self._child = _Child(argv, child_env, float(ready_timeout_s))
        self._session = None
        self._node_id = ray.get_runtime_context().get_node_id()
        try:
            self._replica = serve.get_replica_context().replica_id.unique_id
        except Exception:  # noqa: BLE001 - outside Serve (a plain actor in a test)
            self._replica = f"pid-{os.getpid()}"

    def _client(self):
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                auto_decompress=False,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
                connector=aiohttp.TCPConnector(limit=0),
            )
        return self._session

    def _ids(self):
        return [("x-chatterbox-replica", self._replica), ("x-chatterbox-node", self._node_id)]

    async def __call__(self, request: Request):
        url = self._child.base + request.url.path
        if request.url.query:
            url += "?" + request.url.query
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _HOP]
        body = await request.body()
        try:
            upstream = await self._client().request(
                request.method, url, headers=headers, data=body, allow_redirects=False)
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            alive = self._child.proc.poll() is None
            return _error(503 if alive else 502,
                          f"the replica's chatterbox serve did not answer: {e}",
                          "replica_unavailable")

        async def relay():
            complete = False
            try:
                async for piece in upstream.content.iter_any():
                    yield piece
                complete = True
            finally:
                # A response cut short (the server failed, the client left): drop the
                # connection so that the server stops generating, and let the error reach the
                # proxy, which then cuts the client's response rather than ending it cleanly.
                if complete:
                    upstream.release()
                else:
                    upstream.close()

        response = StreamingResponse(relay(), status_code=upstream.status)
        response.raw_headers = [
            (k.encode("latin-1"), v.encode("latin-1"))
            for k, v in [*_upstream_headers(upstream.headers), *self._ids()]
        ]
        return response

    async def check_health(self):
        """Ray Serve's health check: the server's /ready (200), or the replica is replaced."""
        if self._child.proc.poll() is not None:
            raise RuntimeError(f"chatterbox serve exited with status {self._child.proc.returncode}")
        try:
            async with self._client().get(self._child.base + "/ready",
                                          timeout=aiohttp.ClientTimeout(total=5)) as r:
                body = await r.text()
                status = r.status
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            raise RuntimeError(f"chatterbox serve /ready did not answer: {e!r}") from None
        if status != 200:
            raise RuntimeError(f"chatterbox serve /ready: {status} {body}")

    def __del__(self):
        # Serve has let the requests routed here finish (graceful_shutdown_timeout_s); the
        # server drains anything left on SIGTERM.
        child = getattr(self, "_child", None)
        if child is not None:
            child.stop(self._drain_s)
        session = getattr(self, "_session", None)
        if session is not None and not session.closed:
            try:
                asyncio.get_running_loop().create_task(session.close())
            except RuntimeError:
                pass


def app(args=(), *, num_gpus=0, num_cpus=None, resources=None, min_replicas=1,
        max_replicas=None, num_replicas=None, target_ongoing_requests=2,
        max_ongoing_requests=4, upscale_delay_s=None, downscale_delay_s=None, autoscaling=None,
        env=None, command=None, ready_timeout_s=600.0, drain_timeout_s=30.0, name="chatterbox",
        **deployment_options):
    """The Ray Serve application: pass it to ``serve.run(..., route_prefix="/")``.

    ``args``: ``chatterbox serve``'s options (``--model``, ``--model-dir``, ``--voices``,
    ``--api-key``, ``--queue``, ``--batch``...). One replica holds ``num_gpus`` GPUs (1: one
    replica per GPU) and ``num_cpus`` CPUs (default: 1 with a GPU, else 2), plus any custom
    ``resources``. Without ``num_replicas`` the replicas are autoscaled between
    ``min_replicas`` and ``max_replicas`` (default: ``min_replicas``) on the requests each holds
    (queued in Serve's router and running), aiming at ``target_ongoing_requests`` per replica;
    no replica is sent more than ``max_ongoing_requests`` at once: the rest wait in Serve's
    router, where they count for the autoscaler and go to the first replica with room. The
    defaults (4 and 2) suit a server that speaks one request at a time (the CPU's
    ``--batch 0``); with ``--batch N`` on a GPU raise both towards N (never past ``N +
    --queue``, or the server answers 429). ``autoscaling``: more of Serve's
    ``autoscaling_config`` (``look_back_period_s``, ``initial_replicas``...). Other keywords go
    to ``serve.deployment`` (``graceful_shutdown_timeout_s``, ``health_check_period_s``...).
    """
    actor = {"num_cpus": num_cpus if num_cpus is not None else (1 if num_gpus else 2)}
    if num_gpus:
        actor["num_gpus"] = num_gpus
    if resources:
        actor["resources"] = dict(resources)
    options = {
        "name": name,
        "ray_actor_options": actor,
        "max_ongoing_requests": int(max_ongoing_requests),
        "health_check_period_s": 10,
        "health_check_timeout_s": 30,
        "graceful_shutdown_timeout_s": 60,
    }
    if num_replicas is not None:
        options["num_replicas"] = int(num_replicas)
    else:
        scaling = {
            "min_replicas": int(min_replicas),
            "max_replicas": int(max_replicas if max_replicas is not None else min_replicas),
            "target_ongoing_requests": float(target_ongoing_requests),
        }
        if upscale_delay_s is not None:
            scaling["upscale_delay_s"] = float(upscale_delay_s)
        if downscale_delay_s is not None:
            scaling["downscale_delay_s"] = float(downscale_delay_s)
        scaling.update(autoscaling or {})
        options["autoscaling_config"] = scaling
    options.update(deployment_options)
    deployment = serve.deployment(ChatterboxServer).options(**options)
    return deployment.bind(_server_args(args), env=env, command=command, ready_timeout_s=ready_timeout_s,
                           drain_timeout_s=drain_timeout_s)


def app_builder(cli_args):
    """For ``serve run chatterbox_rs.serve:app_builder key=value ...`` (and Serve's config
    files): ``args`` (``chatterbox serve``'s options in one string), ``num_gpus``,
    ``num_cpus``, ``resources`` (JSON), ``min_replicas``, ``max_replicas``, ``num_replicas``,
    ``target_ongoing_requests``, ``max_ongoing_requests``, ``upscale_delay_s``,
    ``downscale_delay_s``, ``env`` (JSON), ``command`` (split as a shell would)."""
    a = dict(cli_args)
    kw = {}
    for key, conv in (("num_gpus", float), ("num_cpus", float), ("min_replicas", int),
                      ("max_replicas", int), ("num_replicas", int),
                      ("target_ongoing_requests", float), ("max_ongoing_requests", int),
                      ("upscale_delay_s", float), ("downscale_delay_s", float),
                      ("ready_timeout_s", float), ("drain_timeout_s", float)):
        if key in a:
            kw[key] = conv(a.pop(key))
    for key in ("resources", "env"):
        if key in a:
            v = a.pop(key)
            kw[key] = json.loads(v) if isinstance(v, str) else v
    if "command" in a:
        v = a.pop("command")
        kw["command"] = shlex.split(v) if isinstance(v, str) else list(v)
    args = a.pop("args", "")
    if a:
        raise ValueError(f"unknown arguments: {', '.join(sorted(a))}")
    return app(args, **kw)
