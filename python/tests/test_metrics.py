"""Metrics of Python connections and loaders: counts that move by what was
sent and received over tcp and +shm, the wait of next() and recv() while a
producer pauses, prometheus_client's registry with a MetricsCollector,
MetricsExporter scraped over HTTP, and a real Prometheus server scraping a
Python trainer's own endpoint."""
import gc
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import pytest

import tenbin
from conftest import free_port

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

# 100 float32 and 10 int32: 440 tensor bytes a batch.
BATCH_BYTES = 440


def exporter_built():
    try:
        tenbin.MetricsExporter("127.0.0.1:0").close()
        return True
    except tenbin.Unsupported:  # a build without cpp-httplib
        return False


needs_exporter = pytest.mark.skipif(not exporter_built(), reason="the library was built without its HTTP exporter")


def batch(k=0):
    return [np.full(100, k, np.float32), np.arange(10, dtype=np.int32)]


def sample(families, name, **labels):
    """The one sample of family `name` whose labels include `labels`."""
    found = [s for s in families[name]["samples"] if labels.items() <= s["labels"].items()]
    assert len(found) == 1, f"{name}{labels}: {len(found)} samples"
    return found[0]


def value(families, name, **labels):
    return sample(families, name, **labels)["value"]


def series(text):
    """{(sample name, sorted labels): value} of a Prometheus text scrape,
    as prometheus_client reads it."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


@pytest.fixture(params=["tcp", "shm"])
def pair(request, tmp_path):
    """A Loader and a Connection pushing to it, over tcp or +shm."""
    if request.param == "tcp":
        loader = tenbin.Loader("zpull://127.0.0.1:*", timeout=20)
        push_url = loader.endpoints[0][2].replace("tcp://", "zpush://")
    else:
        loader = tenbin.Loader(f"zpull+shm://{tmp_path}/s", timeout=20)
        push_url = f"zpush+shm://{tmp_path}/s"
    producer = tenbin.Connection(push_url, send_timeout=20)
    yield request.param, loader, producer
    producer.close()
    loader.close()


def test_counts_move_by_what_was_sent_and_received(pair):
    transport, loader, producer = pair
    producer.metrics()  # turns the send timings on
    n = 12
    for k in range(n):
        producer.send(batch(k))
    got = [loader.next() for _ in range(n - 2)]
    got += [b for _, b in zip(range(2), loader)]  # iteration goes through next() too
    assert [int(b[0][0]) for b in got] == list(range(n))

    sent = producer.metrics()
    assert value(sent, "tenbin_messages_sent_total") == n
    assert value(sent, "tenbin_bytes_sent_total") == n * BATCH_BYTES
    assert sample(sent, "tenbin_send_duration_seconds")["count"] == n
    assert "tenbin_messages_received_total" not in sent  # each side counts its own direction

    received = loader.metrics()
    endpoint = loader.endpoints[0][2]
    assert value(received, "tenbin_messages_received_total", endpoint=endpoint) == n
    assert value(received, "tenbin_bytes_received_total") == n * BATCH_BYTES
    waits = sample(received, "tenbin_receive_wait_seconds")
    assert waits["count"] == n and waits["buckets"][-1] == (float("inf"), n)
    counts = [c for _, c in waits["buckets"]]
    assert counts == sorted(counts)  # cumulative
    assert value(received, "tenbin_queue_messages") == 0
    assert received["tenbin_messages_received_total"]["type"] == "counter"
    assert received["tenbin_queue_messages"]["type"] == "gauge"
    assert received["tenbin_receive_wait_seconds"]["type"] == "histogram"

    if transport == "shm":
        # Writable arrays are copied into the pool; acquired ones are not.
        assert value(sent, "tenbin_shm_copy_ins_total") == n
        assert value(sent, "tenbin_shm_copy_in_bytes_total") == n * BATCH_BYTES
        a = producer.acquire(100)
        a[...] = 7
        producer.send([a])
        assert loader.next()[0][0] == 7
        sent = producer.metrics()
        assert value(sent, "tenbin_shm_copy_ins_total") == n
        assert value(sent, "tenbin_messages_sent_total") == n + 1
        assert value(sent, "tenbin_shm_peers") == 1
        assert value(loader.metrics(), "tenbin_shm_senders") == 1
    else:
        assert not any(name.startswith("tenbin_shm_") for name in sent)


def test_a_closed_connection_or_loader_keeps_its_last_counts(pair):
    _, loader, producer = pair
    for k in range(3):
        producer.send(batch(k))
    for _ in range(3):
        loader.next()
    producer.close()
    loader.__exit__(None, None, None)  # destroys the C++ loader
    assert value(producer.metrics(), "tenbin_messages_sent_total") == 3
    final = loader.metrics()
    assert value(final, "tenbin_messages_received_total") == 3
    assert sample(final, "tenbin_receive_wait_seconds")["count"] == 3
    assert "tenbin_malformed_messages_total" in final  # listed without series, as before


def paused_producer(producer, pause, count):
    """Sends `count` batches from a thread, the last one `pause` seconds
    after the consumer is told to start waiting (set the event returned)."""
    go = threading.Event()

    def run():
        for k in range(count - 1):
            producer.send(batch(k))
        go.wait(10)
        time.sleep(pause)
        producer.send(batch(count - 1))
    t = threading.Thread(target=run)
    t.start()
    return go, t


@pytest.mark.parametrize("consumer", ["loader", "connection"])
def test_the_wait_histogram_counts_a_pause_of_the_producer(consumer):
    """tenbin_receive_wait_seconds: the time Loader.next() or
    Connection.recv() waited, one observation per batch, however the wait
    was cut into slices (50 ms, for Ctrl-C)."""
    if consumer == "loader":
        source = tenbin.Loader("zpull://127.0.0.1:*", timeout=20)
        take = source.next
    else:
        source = tenbin.Connection("zpull://127.0.0.1:*", timeout=20)
        take = source.recv
    source.metrics()  # a Connection times its receives from here on
    producer = tenbin.Connection(source.endpoints[0][2].replace("tcp://", "zpush://"))
    pause, n = 0.6, 5
    go, thread = paused_producer(producer, pause, n)
    for _ in range(n - 1):
        take()
    go.set()
    last = take()
    thread.join(20)
    assert int(last[0][0]) == n - 1
    waits = sample(source.metrics(), "tenbin_receive_wait_seconds")
    assert waits["count"] == n
    # The pause at least, in the last batch's wait: above 0.5 s.
    assert waits["sum"] >= pause - 0.05
    assert dict(waits["buckets"])[0.5] <= n - 1
    producer.close()
    source.close()


@needs_exporter
def test_the_collector_serves_what_the_exporter_serves_in_the_trainers_registry(tmp_path):
    loader = tenbin.Loader("zpull://127.0.0.1:*", timeout=20)
    producer = tenbin.Connection(loader.endpoints[0][2].replace("tcp://", "zpush://"))
    for k in range(4):
        producer.send(batch(k))
    for _ in range(4):
        loader.next()

    registry = prometheus_client.CollectorRegistry()
    steps = prometheus_client.Counter("trainer_steps", "Training steps taken.", registry=registry)
    steps.inc(4)
    registry.register(tenbin.MetricsCollector(loader, producer))
    text = prometheus_client.generate_latest(registry).decode()
    with tenbin.MetricsExporter("127.0.0.1:0", [loader, producer]) as exporter:
        exported = exporter.text()

    # The same families (names, types, help) and series (names, labels, values).
    ours = {f.name: f for f in text_string_to_metric_families(text)}
    theirs = {f.name: f for f in text_string_to_metric_families(exported)}
    assert {name for name in ours if name.startswith("tenbin_")} == set(theirs) and "trainer_steps" in ours
    for name, f in theirs.items():
        assert (ours[name].type, ours[name].documentation) == (f.type, f.documentation), name
    tenbin_series = {k: v for k, v in series(text).items() if k[0].startswith("tenbin_")}
    assert tenbin_series == series(exported)
    assert series(text)[("trainer_steps_total", ())] == 4
    assert "# TYPE tenbin_receive_wait_seconds histogram" in text
    assert 'tenbin_receive_wait_seconds_bucket{connection="",endpoint="%s",le="1e-04"}' % loader.endpoints[0][2] in text
    assert 'tenbin_messages_received_total{connection="",endpoint="%s"} 4.0' % loader.endpoints[0][2] in text
    if shutil.which("promtool"):
        check = subprocess.run(["promtool", "check", "metrics"], input=text.encode(), capture_output=True, timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr

    # The counts move between scrapes; a source that is gone leaves them.
    producer.send(batch(4))
    loader.next()
    assert series(prometheus_client.generate_latest(registry).decode())[
        ("tenbin_messages_received_total", (("connection", ""), ("endpoint", loader.endpoints[0][2])))] == 5
    producer.close()
    del producer
    gc.collect()
    text = prometheus_client.generate_latest(registry).decode()
    assert "tenbin_messages_sent_total" not in text and "tenbin_messages_received_total" in text
    loader.close()


def test_the_collector_refuses_what_it_cannot_serve():
    loader = tenbin.Loader("zpull://127.0.0.1:*", timeout=20)
    with pytest.raises(tenbin.BadArgument, match="Connection or tenbin.Loader"):
        tenbin.MetricsCollector(loader, "tcp://127.0.0.1:5555")
    # Two sources with the same series: one of them would hide the other.
    with pytest.raises(tenbin.BadArgument):
        tenbin.MetricsCollector(loader, loader)
    with pytest.raises(tenbin.Closed, match="not connected"):
        tenbin.MetricsCollector(tenbin.Connection())
    loader.close()


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.headers["Content-Type"], r.read().decode()


@needs_exporter
def test_the_exporter_serves_prometheus_text_over_http():
    loader = tenbin.Loader("zpull://127.0.0.1:*", timeout=20)
    producer = tenbin.Connection(loader.endpoints[0][2].replace("tcp://", "zpush://"))
    with tenbin.MetricsExporter("127.0.0.1:0", [loader]) as exporter:
        assert exporter.address == f"127.0.0.1:{exporter.port}" and exporter.port > 0
        url = f"http://{exporter.address}/metrics"
        for k in range(3):
            producer.send(batch(k))
        for _ in range(3):
            loader.next()
        status, content_type, text = get(url)
        assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
        got = series(text)
        labels = (("connection", ""), ("endpoint", loader.endpoints[0][2]))
        assert got[("tenbin_messages_received_total", labels)] == 3
        assert got[("tenbin_bytes_received_total", labels)] == 3 * BATCH_BYTES
        assert got[("tenbin_receive_wait_seconds_count", labels)] == 3
        assert not any(name == "tenbin_messages_sent_total" for name, _ in got)
        assert exporter.scrapes == 1

        # add() serves another source from the next scrape on.
        exporter.add(producer)
        assert series(get(url)[2])[("tenbin_messages_sent_total", labels)] == 3
        assert series(exporter.text()) == series(get(url)[2])
        with pytest.raises(tenbin.BadArgument):
            exporter.add(producer)  # its series are served already
        with pytest.raises(urllib.error.HTTPError) as e:
            get(f"http://{exporter.address}/other")
        assert e.value.code == 404

        # wait_for_scrape: a scrape after the call, or False at the timeout.
        assert not exporter.wait_for_scrape(0.2)
        later = threading.Timer(0.3, get, [url])
        later.start()
        assert exporter.wait_for_scrape(20)
        later.join()
        assert exporter.scrapes == 4  # the 404 is no scrape
        assert repr(exporter) == f"<tenbin.MetricsExporter {url}, 4 scrapes>"
    with pytest.raises(urllib.error.URLError):
        get(url)

    # Bad addresses raise typed errors naming them.
    with pytest.raises(tenbin.BadArgument):
        tenbin.MetricsExporter("host:port")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(tenbin.IOFailure, match=str(port)):
            tenbin.MetricsExporter(f"127.0.0.1:{port}")
    producer.close()
    loader.close()


# A trainer with a Prometheus endpoint of its own (prometheus_client's WSGI
# app on the standard library's server) and tenbin's metrics in it: it
# prints its endpoint and its loader's, takes `n` batches (saying when it
# waits for the last), then waits to be told to go (stdin closed).
TRAINER = """
import sys, threading
from wsgiref.simple_server import WSGIRequestHandler, make_server
import prometheus_client, tenbin

class Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass

n = int(sys.argv[1])
loader = tenbin.Loader("zpull://127.0.0.1:*", timeout=60)
steps = prometheus_client.Counter("trainer_steps", "Training steps taken.")
prometheus_client.REGISTRY.register(tenbin.MetricsCollector(loader))
server = make_server("127.0.0.1", 0, prometheus_client.make_wsgi_app(), handler_class=Quiet)
threading.Thread(target=server.serve_forever, daemon=True).start()
print(server.server_port, loader.endpoints[0][2], flush=True)
for step in range(n):
    if step == n - 1:
        print("waiting", flush=True)
    loader.next()
    steps.inc()
print("trained", flush=True)
sys.stdin.read()
"""


class Prometheus:
    """Debian's Prometheus server on loopback, scraping `targets` every
    second, its data and log in `folder`."""

    def __init__(self, folder, targets):
        config = folder / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                          "scrape_configs:\n  - job_name: tenbin\n    static_configs:\n"
                          f"      - targets: {json.dumps(targets)}\n")
        self.port = free_port()
        self.log_path = folder / "log.txt"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT)

    def query(self, q, until=lambda v: True, limit=60):
        """The value of instant query `q` once it has one for which `until`
        holds, waiting at most `limit` seconds; None past it."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    result = json.loads(r.read())["data"]["result"]
                if result and until(float(result[0]["value"][1])):
                    return float(result[0]["value"][1])
            except (urllib.error.URLError, ConnectionError):
                pass  # not up yet
            time.sleep(0.2)
        return None

    def log(self):
        return self.log_path.read_text(errors="replace")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@needs_exporter
@pytest.mark.skipif(shutil.which("prometheus") is None,
                    reason="prometheus is not installed (.ci/install-deps installs it)")
def test_a_prometheus_server_scrapes_a_python_trainer_and_a_python_exporter(tmp_path):
    """The trainer serves tenbin's metrics in its own prometheus_client
    endpoint (MetricsCollector); the producer here serves its own with a
    MetricsExporter, still after it is closed."""
    n, pause = 7, 0.5
    trainer = subprocess.Popen([sys.executable, "-c", TRAINER, str(n)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, env=dict(os.environ))
    prometheus = exporter = None
    try:
        port, endpoint = trainer.stdout.readline().decode().split()
        producer = tenbin.Connection(endpoint.replace("tcp://", "zpush://"), send_timeout=30)
        exporter = tenbin.MetricsExporter("127.0.0.1:0", [producer])
        prometheus = Prometheus(tmp_path, [f"127.0.0.1:{port}", exporter.address])
        # 6 batches, then one after a pause the trainer spends waiting.
        for k in range(n - 1):
            producer.send(batch(k))
        assert trainer.stdout.readline() == b"waiting\n"
        time.sleep(pause)
        producer.send(batch(n - 1))
        assert trainer.stdout.readline() == b"trained\n"
        producer.close()

        received = prometheus.query("tenbin_messages_received_total", until=lambda v: v == n)
        assert received == n, f"Prometheus never saw {n} batches received; its log:\n{prometheus.log()}"
        selector = '{endpoint="%s"}' % endpoint
        assert prometheus.query("tenbin_bytes_received_total" + selector) == n * BATCH_BYTES
        assert prometheus.query("tenbin_receive_wait_seconds_count" + selector) == n
        assert prometheus.query("tenbin_receive_wait_seconds_sum" + selector) >= pause - 0.05
        # The buckets as Prometheus reads them: the pause is above 0.25 s.
        assert prometheus.query('tenbin_receive_wait_seconds_bucket{le="0.25"}') <= n - 1
        # The trainer's own series, in the same endpoint.
        assert prometheus.query("trainer_steps_total") == n
        # The producer's, from the exporter.
        assert prometheus.query("tenbin_messages_sent_total" + selector, until=lambda v: v == n) == n
        assert prometheus.query("tenbin_bytes_sent_total" + selector) == n * BATCH_BYTES
        assert prometheus.query('count(up{job="tenbin"} == 1)') == 2
    finally:
        if prometheus:
            prometheus.stop()
        if exporter:
            exporter.close()
        trainer.stdin.close()
        trainer.wait(30)
    assert trainer.returncode == 0


@pytest.mark.skipif(shutil.which("prometheus") is None,
                    reason="prometheus is not installed (.ci/install-deps installs it)")
def test_a_prometheus_server_scrapes_tenbin_serve_and_a_python_trainer(tmp_path, tool):
    """`tenbin serve --metrics` paced at 4 batches a second feeds the
    trainer, which waits for each: Prometheus sees what serve sent, what
    the trainer received, and the trainer's wait. promtool passes on
    serve's scrape."""
    import re

    n = 5
    trainer = subprocess.Popen([sys.executable, "-c", TRAINER, str(n)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, env=dict(os.environ))
    prometheus = serve = None
    try:
        port, endpoint = trainer.stdout.readline().decode().split()
        # x: 100 float32, y: 10 int32: 440 bytes a batch.
        serve = subprocess.Popen([tool, "serve", endpoint.replace("tcp://", "zpush://"), "--synthetic",
                                  "x=f4:100;y=i4:10", "-n", str(n), "--rate", "4", "--report", "0",
                                  "--metrics", "127.0.0.1:0", "--metrics-wait", "60"],
                                 stderr=subprocess.PIPE)
        serve_url = None
        for line in iter(serve.stderr.readline, b""):
            m = re.search(rb"metrics at (http://\S+)", line)
            if m:
                serve_url = m[1].decode()
                break
        assert serve_url, "tenbin serve did not say where its metrics are"
        with urllib.request.urlopen(serve_url, timeout=10) as r:
            text = r.read()
        if shutil.which("promtool"):
            check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=60)
            assert check.returncode == 0, check.stdout + check.stderr
        prometheus = Prometheus(tmp_path, [f"127.0.0.1:{port}", serve_url.split("/")[2]])

        sent = prometheus.query('tenbin_messages_sent_total{connection="serve"}', until=lambda v: v == n)
        assert sent == n, f"Prometheus never saw {n} batches sent; its log:\n{prometheus.log()}"
        assert prometheus.query('tenbin_bytes_sent_total{connection="serve"}') == n * BATCH_BYTES
        selector = '{endpoint="%s"}' % endpoint
        assert prometheus.query("tenbin_messages_received_total" + selector, until=lambda v: v == n) == n
        assert prometheus.query("tenbin_bytes_received_total" + selector) == n * BATCH_BYTES
        assert prometheus.query("tenbin_receive_wait_seconds_count" + selector) == n
        # Paced at 4 a second: the trainer waited about 0.25 s for each after the first.
        assert prometheus.query("tenbin_receive_wait_seconds_sum" + selector) >= 0.15 * (n - 1)
        # Both targets were up: serve, once scraped at its end, may be gone by now.
        assert prometheus.query('count(max_over_time(up{job="tenbin"}[5m]) == 1)') == 2
        assert serve.wait(90) == 0  # --metrics-wait: done once Prometheus scraped the end
    finally:
        if prometheus:
            prometheus.stop()
        if serve and serve.poll() is None:
            serve.kill()
            serve.wait()
        trainer.stdin.close()
        trainer.wait(30)
    assert trainer.returncode == 0
