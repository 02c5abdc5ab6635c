"""`chatterbox_rs.serve` on a real Ray cluster of two nodes on this machine (two `ray start`
processes on the loopback addresses 127.0.0.2 (head) and 127.0.0.3, every port picked free,
no dashboard, temp dirs under the test's tmp), the official `openai` client against Ray
Serve's HTTP proxy on the head:

- the replicas answer byte for byte what `chatterbox serve` answers directly (a whole WAV, a
  chunked PCM stream, an SSE stream, for the same seed) and its errors (404 with OpenAI's
  body);
- Ray's autoscaler scales the deployment from one replica to two under concurrent load (one
  per node: each node has one `replica_slot`), and both answer;
- the worker node is killed (its raylet and every process under it, SIGKILL) while streams are
  in flight on both replicas: the streams on the killed node end in an error (a cut chunked
  body, or a 500 before the headers), never a short body passed as success; every request on
  the survivor completes whole; new requests all go to the survivor;
- a replica whose server died answers 502 (OpenAI's error form) until its health check (the
  server's /ready) fails, then Serve replaces it;
- deleting the application lets the stream in flight finish (Serve's graceful shutdown, then
  SIGTERM drains the server), and the replica's server exits.

Teardown kills the processes of both nodes by process tree (never `ray stop`, which stops
every Ray process of the machine) and checks none is left.
"""
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import wave

import pytest

ray = pytest.importorskip("ray", reason="needs ray[serve] (pip install 'chatterbox-rs[serve]')")
serve = pytest.importorskip("ray.serve")
openai = pytest.importorskip("openai")

# the autoscaler's metrics every 0.5 s (the field is deprecated for environment variables,
# which the cluster sets too, but look_back_period_s is still checked against it)
pytestmark = pytest.mark.filterwarnings("ignore:The `metrics_interval_s` field:DeprecationWarning")

SR = 24_000
HEAD_IP, WORKER_IP = "127.0.0.2", "127.0.0.3"
SERVE_ARGS = ["--max-new-tokens", "100", "--no-watermark", "--queue", "16"]
# About 40 s of speech from the tiny model (100 tokens per sentence chunk): 2-3 s to generate
# on a 2-core machine, so a stream stays in flight long enough to kill its node.
LONG = " ".join(f"This is sentence number {i}." for i in range(130))
SHORT = "Hello there. This is Ray."


def test_app_builder_reads_serve_run_arguments():
    """`serve run chatterbox_rs.serve:app_builder key=value ...` passes strings: they become
    the deployment's options and the server's arguments."""
    from chatterbox_rs.serve import app_builder

    d = app_builder({"args": "--model turbo --voices '/v dir'", "num_gpus": "1",
                     "min_replicas": "2", "max_replicas": "8", "target_ongoing_requests": "12",
                     "max_ongoing_requests": "24", "env": '{"CANDLE_NUM_THREADS": "4"}',
                     "resources": '{"tts": 1}'})._bound_deployment
    assert d.init_args == (["--model", "turbo", "--voices", "/v dir"],)
    assert d.init_kwargs["env"] == {"CANDLE_NUM_THREADS": "4"}
    assert d.ray_actor_options == {"num_cpus": 1, "num_gpus": 1.0, "resources": {"tts": 1}}
    assert d.max_ongoing_requests == 24
    scaling = d._deployment_config.autoscaling_config
    assert (scaling.min_replicas, scaling.max_replicas, scaling.target_ongoing_requests) == (
        2, 8, 12.0)
    with pytest.raises(ValueError, match="num_gpu"):
        app_builder({"num_gpu": "1"})
    from chatterbox_rs.serve import ChatterboxServer

    with pytest.raises(ValueError, match="--port"):
        ChatterboxServer(["--port", "9000"])


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _procs():
    """pid -> (parent pid, command line) of every process."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except (OSError, ValueError):
            continue
        out[int(d)] = (ppid, cmd)
    return out


def process_tree(markers):
    """The processes whose command line holds one of `markers` and all their descendants
    (Ray's workers are the raylet's children, named `ray::...`; the servers are theirs),
    never this process or its ancestors."""
    procs = _procs()
    mine, p = set(), os.getpid()
    while p > 1 and p not in mine:
        mine.add(p)
        p = procs.get(p, (1, ""))[0]
    roots = {p for p, (_, cmd) in procs.items() if p not in mine and any(m in cmd for m in markers)}
    children = {}
    for p, (pp, _) in procs.items():
        children.setdefault(pp, []).append(p)
    out, todo = set(), list(roots)
    while todo:
        p = todo.pop()
        if p in out or p in mine:
            continue
        out.add(p)
        todo.extend(children.get(p, []))
    return out


def kill_tree(markers, within=15.0):
    """SIGKILL to the tree of `markers`, until none is left (zombies aside); its pids."""
    killed = set()
    deadline = time.monotonic() + within
    while True:
        pids = {p for p in process_tree(markers) if not _zombie(p)}
        if not pids:
            return killed
        if time.monotonic() > deadline:
            raise AssertionError(f"processes left after SIGKILL: {sorted(pids)}")
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        killed |= pids
        time.sleep(0.2)


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        return stat[stat.rindex(")") + 2] == "Z"
    except OSError:
        return True


def ray_start(args, env, node_dir):
    """`ray start` (the venv's) for one node, its ports all free ones on loopback."""
    ports = []
    for flag in ("--node-manager-port", "--object-manager-port", "--ray-client-server-port",
                 "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port",
                 "--runtime-env-agent-port", "--metrics-export-port"):
        ports += [flag, str(free_port())]
    cmd = [os.path.join(os.path.dirname(sys.executable), "ray"), "start", *args, *ports,
           "--num-cpus", "1", "--resources", json.dumps({"replica_slot": 1}),
           "--object-store-memory", str(80 * 1024 * 1024), "--temp-dir", node_dir,
           "--disable-usage-stats"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{' '.join(cmd)}:\n{r.stdout}\n{r.stderr}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two Ray nodes on this machine, this process their driver; torn down by process tree."""
    base = str(tmp_path_factory.mktemp("ray"))
    if len(base) > 40:  # Ray's unix sockets live under the temp dir: 107 bytes at most
        import tempfile

        base = tempfile.mkdtemp(prefix="cbray-")
    head_dir, worker_dir = os.path.join(base, "h"), os.path.join(base, "w")
    gcs = free_port()
    env = dict(os.environ)
    env.update({
        "RAY_USAGE_STATS_ENABLED": "0",
        # the autoscaler hears of queue lengths every half second (default 10 s)
        "RAY_SERVE_HANDLE_AUTOSCALING_METRIC_PUSH_INTERVAL_S": "0.5",
        "RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S": "0.5",
        "HF_HUB_OFFLINE": "1",
        # the head declares a silent node dead after 3 missed 1 s health checks (default 5 x 3 s)
        "RAY_health_check_period_ms": "1000",
        "RAY_health_check_timeout_ms": "1000",
        "RAY_health_check_failure_threshold": "3",
    })
    env.pop("CHATTERBOX_DEVICE", None)
    markers = [head_dir + "/", worker_dir + "/", f"{HEAD_IP}:{gcs}"]
    info = {"head_dir": head_dir, "worker_dir": worker_dir, "markers": markers}
    try:
        t0 = time.monotonic()
        ray_start(["--head", "--node-ip-address", HEAD_IP, "--port", str(gcs),
                   "--include-dashboard=false", "--dashboard-port", str(free_port())], env,
                  head_dir)
        ray_start(["--address", f"{HEAD_IP}:{gcs}", "--node-ip-address", WORKER_IP], env,
                  worker_dir)
        ray.init(address=f"{HEAD_IP}:{gcs}", logging_level="warning", log_to_driver=False)
        nodes = {n["NodeManagerAddress"]: n["NodeID"] for n in ray.nodes() if n["Alive"]}
        assert set(nodes) == {HEAD_IP, WORKER_IP}, nodes
        info.update(head=nodes[HEAD_IP], worker=nodes[WORKER_IP], http=free_port())
        serve.start(proxy_location="HeadOnly", http_options={"host": HEAD_IP,
                                                              "port": info["http"]})
        print(f"cluster up in {time.monotonic() - t0:.1f} s", flush=True)
        yield info
    finally:
        try:
            ray.shutdown()
        finally:
            kill_tree(markers)
        left = [cmd for _, cmd in _procs().values() if any(m in cmd for m in markers)]
        assert not left, left


def client(cluster, retries=0):
    return openai.OpenAI(base_url=f"http://{HEAD_IP}:{cluster['http']}/v1", api_key="unused",
                         max_retries=retries, timeout=90)


def wav_frames(data):
    with wave.open(io.BytesIO(data)) as w:
        assert (w.getnchannels(), w.getframerate(), w.getsampwidth()) == (1, SR, 2)
        n = w.getnframes()
        assert len(w.readframes(n)) == 2 * n
        return n


class Direct:
    """`chatterbox serve` run directly (this package's command), the reference answers."""

    def __init__(self, args):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "chatterbox_rs._cli", "serve", *args, "--device", "cpu",
             "--host", "127.0.0.1", "--port", "0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True)
        deadline = time.monotonic() + 60
        self.url = None
        while self.url is None:
            line = self.proc.stderr.readline()
            assert line and time.monotonic() < deadline, "the server printed no address"
            if "listening on http://" in line:
                self.url = line.split("listening on ")[1].split()[0]
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()
        c = openai.OpenAI(base_url=self.url + "/v1", api_key="unused", max_retries=0)
        while True:
            try:
                c.models.list()
                return
            except openai.APIStatusError:  # 503 while loading
                assert time.monotonic() < deadline
                time.sleep(0.1)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=15) == 0


def speech(c, fmt="wav", stream=None, text=SHORT, seed=7):
    """(headers, body) of one speech request read whole."""
    extra = {"seed": seed}
    if stream:
        extra["stream_format"] = stream
    with c.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input=text, response_format=fmt,
            extra_body=extra) as r:
        return r.headers, r.read()


def replica_states():
    app = serve.status().applications.get("default")
    if app is None:
        return {}
    return dict(app.deployments["chatterbox"].replica_states)


def wait_for(what, cond, timeout):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out ({timeout} s) waiting for {what}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def deployed(cluster, hf_home):
    from chatterbox_rs.serve import app

    home, dirs = hf_home
    args = ["--model-dir", dirs["english"], *SERVE_ARGS]
    t0 = time.monotonic()
    serve.run(
        app(args, num_cpus=0.5, resources={"replica_slot": 1}, min_replicas=1, max_replicas=2,
            target_ongoing_requests=1, max_ongoing_requests=2, upscale_delay_s=0,
            downscale_delay_s=600,
            autoscaling={"metrics_interval_s": 0.5, "look_back_period_s": 1.0},
            ready_timeout_s=120, env={"CHATTERBOX_NO_WATERMARK": "1"},
            health_check_period_s=1, health_check_timeout_s=5),
        route_prefix="/", blocking=False)
    wait_for("the first replica", lambda: replica_states().get("RUNNING") == 1, 120)
    print(f"deployed in {time.monotonic() - t0:.1f} s", flush=True)
    return args


def test_replicas_answer_what_the_server_answers(cluster, deployed):
    direct = Direct(deployed)
    try:
        ours, theirs = client(cluster), openai.OpenAI(base_url=direct.url + "/v1",
                                                      api_key="unused", max_retries=0)
        for fmt, stream in (("wav", None), ("pcm", "audio"), ("wav", "sse")):
            h1, a = speech(ours, fmt, stream)
            h2, b = speech(theirs, fmt, stream)
            assert a == b, (fmt, stream, len(a), len(b))
            assert h1["content-type"] == h2["content-type"]
            assert h1["x-chatterbox-node"] in (cluster["head"], cluster["worker"])
            assert h1["x-chatterbox-replica"]
            if stream is None:
                assert wav_frames(a) > SR // 2
                assert h1["content-length"] == str(len(a))
            elif stream == "audio":
                assert "content-length" not in h1 and len(a) > SR and len(a) % 2 == 0
            else:
                events = [json.loads(e[6:]) for e in a.decode().split("\n\n") if e]
                assert events[-1]["type"] == "speech.audio.done"
                assert {e["type"] for e in events[:-1]} == {"speech.audio.delta"}
        # the server's errors, as its own: OpenAI's error object and status
        for c in (ours, theirs):
            with pytest.raises(openai.NotFoundError) as e:
                c.audio.speech.create(model="no-such-model", voice="alloy", input="Hi.")
            assert e.value.body["code"] == "model_not_found"
            with pytest.raises(openai.BadRequestError) as e:
                c.audio.speech.create(model="tts-1", voice="alloy", input="Hi.", speed=9)
            assert e.value.body["param"] == "speed"
        assert [m.id for m in ours.models.list()] == [m.id for m in theirs.models.list()]
    finally:
        direct.stop()


def _run_streams(c, n, text, results):
    """`n` streaming requests (chunked PCM) on threads, each noting its node, bytes and how it
    ended."""

    def one(i):
        r = results[i] = {"bytes": 0, "node": None, "ok": False, "error": None}
        try:
            with c.audio.speech.with_streaming_response.create(
                    model="tts-1", voice="alloy", input=text, response_format="pcm",
                    extra_body={"stream_format": "audio", "seed": i}) as s:
                r["node"] = s.headers["x-chatterbox-node"]
                for piece in s.iter_bytes():
                    r["bytes"] += len(piece)
            r["ok"] = True
        except Exception as e:  # noqa: BLE001 - what a client sees is the point
            r["error"] = e

    start = len(results)
    threads = [threading.Thread(target=one, args=(start + k,), daemon=True) for k in range(n)]
    for t in threads:
        t.start()
    return threads


def test_autoscaler_adds_the_second_replica_under_load(cluster, deployed):
    assert replica_states() == {"RUNNING": 1}
    c = client(cluster)
    results = {}
    threads = _run_streams(c, 4, LONG, results)
    wait_for("a second replica", lambda: replica_states().get("RUNNING") == 2, 90)
    for t in threads:
        t.join(120)
    assert all(r["ok"] for r in results.values()), results
    # both replicas answer now: concurrent requests beyond one replica's two reach the other
    nodes = set()
    for _ in range(3):
        results = {}
        for t in _run_streams(c, 4, SHORT, results):
            t.join(60)
        assert all(r["ok"] and r["bytes"] > SR for r in results.values()), results
        nodes |= {r["node"] for r in results.values()}
        if len(nodes) == 2:
            break
    assert nodes == {cluster["head"], cluster["worker"]}


def test_a_node_lost_mid_load_fails_its_requests_cleanly(cluster, deployed):
    assert replica_states() == {"RUNNING": 2}
    c = client(cluster)
    results = {}
    threads = _run_streams(c, 4, LONG, results)
    # wait until a stream on the worker's replica is under way (bytes received), then kill the
    # worker node: its raylet and every process under it (workers, the replica, its server)
    wait_for("a stream from the worker node", lambda: any(
        r["node"] == cluster["worker"] and r["bytes"] > 0 for r in list(results.values())), 60)
    in_flight = {i: dict(r) for i, r in results.items()}
    killed = kill_tree([cluster["worker_dir"] + "/"])
    assert len(killed) >= 3
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    for i, r in sorted(results.items()):
        where = {cluster["head"]: "head", cluster["worker"]: "worker", None: "-"}[r["node"]]
        print(f"stream {i}: {where}, {r['bytes']} bytes, {'ok' if r['ok'] else repr(r['error'])}")
    for i, r in results.items():
        if r["node"] == cluster["worker"]:
            # cut mid-body: the client sees an incomplete chunked body, never a clean end
            assert not r["ok"], (i, r)
            assert "incomplete chunked read" in str(r["error"]) or isinstance(
                r["error"], openai.APIConnectionError), (i, repr(r["error"]))
        elif r["ok"]:
            assert r["node"] == cluster["head"]
            assert r["bytes"] > 20 * SR * 2, (i, r)  # the whole long text
        else:
            # not yet answered when its replica died: a 500 from the proxy
            assert isinstance(r["error"], openai.InternalServerError), (i, repr(r["error"]))
            assert in_flight[i]["node"] is None
    assert any(r["node"] == cluster["worker"] for r in results.values())
    assert any(r["ok"] for r in results.values())
    # new requests: all on the survivor, all whole
    results = {}
    for t in _run_streams(c, 4, SHORT, results):
        t.join(60)
    assert all(r["ok"] and r["node"] == cluster["head"] and r["bytes"] > SR
               for r in results.values()), results
    _, body = speech(c, "wav")
    assert wav_frames(body) > SR // 2
    alive = lambda: {n["NodeID"]: n["Alive"] for n in ray.nodes()}  # noqa: E731
    wait_for("the head to declare the worker node dead",
             lambda: not alive().get(cluster["worker"], False), 30)
    assert alive()[cluster["head"]]


def servers(deployed):
    """pids of the replicas' `chatterbox serve` processes."""
    return [p for p, (_, cmd) in _procs().items()
            if "chatterbox_rs._cli serve" in cmd and deployed[1] in cmd and not _zombie(p)]


def test_a_replica_whose_server_died_fails_its_health_check_and_is_replaced(cluster, deployed):
    c = client(cluster)
    (pid,) = servers(deployed)  # the survivor's
    old = c.audio.speech.with_raw_response.create(
        model="tts-1", voice="alloy", input=SHORT).headers["x-chatterbox-replica"]
    os.kill(pid, signal.SIGKILL)
    # until Serve notices (/ready no longer answers), the replica answers 502 in OpenAI's form
    with pytest.raises(openai.APIStatusError) as e:
        c.audio.speech.create(model="tts-1", voice="alloy", input=SHORT)
    assert e.value.status_code in (500, 502), e.value
    print(f"with its server dead the replica answered {e.value.status_code}: {e.value.body}")
    if e.value.status_code == 502:
        assert e.value.body["code"] == "replica_unavailable"

    def replaced():
        try:
            r = c.audio.speech.with_raw_response.create(model="tts-1", voice="alloy",
                                                        input=SHORT, response_format="wav")
        except openai.APIStatusError:
            return False
        return r.headers["x-chatterbox-replica"] != old and wav_frames(r.content) > SR // 2

    wait_for("a new replica", replaced, 90)
    assert len(servers(deployed)) == 1


def test_deleting_the_app_drains_the_stream_in_flight(cluster, deployed):
    c = client(cluster)
    pids = servers(deployed)
    assert len(pids) == 1, pids  # the survivor's
    results = {}
    threads = _run_streams(c, 1, LONG, results)
    wait_for("the stream's first bytes", lambda: results[0]["bytes"] > 0, 60)
    serve.delete("default", _blocking=False)
    threads[0].join(120)
    assert results[0]["ok"] and results[0]["bytes"] > 20 * SR * 2, results
    wait_for("the replica's server to exit", lambda: not any(
        p in _procs() and not _zombie(p) for p in pids), 90)
