"""``--ray-address`` (or ``$RAY_ADDRESS``) that is malformed or where nothing answers: one line, exit code 2, within
seconds, no output folder. ``ray.init`` used to retry such an address for minutes, printing Ray's C++ log lines,
and SIGTERM did not stop it.

No cluster is needed: ``ray.init`` is replaced by one that raises, so a run that gets past the address check
ends with ``--ray-address ADDR: ray.init reached`` instead of joining anything.
"""
import socket
import time
from pathlib import Path

import pytest

from conftest import SAMPLES, runner
from rladv_cli.cli import app

ray = pytest.importorskip("ray")

DATA = SAMPLES / "groups.parquet"
LOCAL_HINT = 'start a cluster with "ray start --head" or omit --ray-address for a local one'


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch):
    """``ray.init`` raises instead of joining; the calls it got are returned."""
    calls = []

    def init(**options):
        calls.append(options)
        raise ValueError("ray.init reached")

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return calls


def compute(tmp_path: Path, *address: str, env: dict | None = None):
    """``rladv compute --engine ray`` on the sample data, with ``--ray-address`` when given; the result and the
    seconds it took."""
    args = ["compute", str(DATA), "--estimator", "grpo", "--engine", "ray", "-o", str(tmp_path / "out"), "-q"]
    start = time.monotonic()
    result = runner.invoke(app, args + (["--ray-address", *address] if address else []), env=env)
    return result, time.monotonic() - start


def free_port(host: str) -> int:
    """A port on ``host`` where nothing listens (bound, then closed); skips where ``host`` cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family) as sock:
            sock.bind((host, 0))
            return sock.getsockname()[1]
    except OSError as err:
        pytest.skip(f"cannot bind {host}: {err}")


@pytest.mark.parametrize("form", ["127.0.0.1:{}", "ray://127.0.0.1:{}", "[::1]:{}", "localhost:{}"])
def test_a_refused_address_is_one_line(tmp_path, no_cluster, form):
    address = form.format(free_port("::1" if "::1" in form else "127.0.0.1"))
    result, seconds = compute(tmp_path, address)
    assert result.exit_code == 2
    assert result.output == (f"Error: --ray-address {address}: nothing answers there (connection refused); "
                             f"{LOCAL_HINT}\n")
    assert seconds < 10 and not no_cluster and not (tmp_path / "out").exists()


def test_an_unresolvable_host_is_one_line(tmp_path, no_cluster):
    result, _ = compute(tmp_path, "nonexistent.invalid:6379")  # .invalid never resolves (RFC 2606)
    assert result.exit_code == 2
    assert result.output == (f"Error: --ray-address nonexistent.invalid:6379: cannot resolve host nonexistent.invalid; "
                             f"{LOCAL_HINT}\n")
    assert not no_cluster


def test_an_address_that_never_answers_is_one_line(tmp_path, no_cluster, monkeypatch):
    from rladv_cli.pipeline.ray_engine import PROBE_SECONDS

    def create_connection(address, timeout):
        assert timeout == PROBE_SECONDS
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", create_connection)
    result, _ = compute(tmp_path, "10.255.255.1:6379")
    assert result.exit_code == 2
    assert result.output == (f"Error: --ray-address 10.255.255.1:6379: nothing answers there (no reply within "
                             f"{PROBE_SECONDS} s); {LOCAL_HINT}\n")
    assert not no_cluster


@pytest.mark.parametrize("address, problem", [
    ("head", "no port"),
    ("head:", "no port"),
    ("ray://head", "no port"),
    ("[::1]", "no port"),
    (":6379", "no host"),
    ("ray://:10001", "no host"),
    ("head:abc", "port abc is not a number from 1 to 65535"),
    ("head:0", "port 0 is not a number from 1 to 65535"),
    ("head:65536", "port 65536 is not a number from 1 to 65535"),
    ("head: 6379", "port  6379 is not a number from 1 to 65535"),
    ("::1:6379", "more than one colon (an IPv6 host goes in brackets)"),
    ("head:6379:1", "more than one colon (an IPv6 host goes in brackets)"),
])
def test_a_malformed_address_is_one_line(tmp_path, no_cluster, monkeypatch, address, problem):
    monkeypatch.setattr(socket, "create_connection", pytest.fail)  # refused before any connection is tried
    result, _ = compute(tmp_path, address)
    assert result.exit_code == 2
    assert result.output == (f"Error: --ray-address {address}: {problem}; expected HOST:PORT (head:6379, [::1]:6379) "
                             f"or ray://HOST:PORT\n")
    assert not no_cluster and not (tmp_path / "out").exists()


def test_an_address_from_the_environment_is_named_so(tmp_path, no_cluster):
    address = f"127.0.0.1:{free_port('127.0.0.1')}"
    result, _ = compute(tmp_path, env={"RAY_ADDRESS": address})
    assert result.exit_code == 2
    assert result.output == (f"Error: $RAY_ADDRESS {address}: nothing answers there (connection refused); start a "
                             f'cluster with "ray start --head" or unset RAY_ADDRESS for a local one\n')
    malformed, _ = compute(tmp_path, env={"RAY_ADDRESS": "head"})
    assert malformed.output.startswith("Error: $RAY_ADDRESS head: no port;")
    assert not no_cluster


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_an_address_that_answers_goes_to_ray(tmp_path, no_cluster, host):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as server:
        try:
            server.bind((host, 0))
        except OSError as err:
            pytest.skip(f"cannot bind {host}: {err}")
        server.listen()
        port = server.getsockname()[1]
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        result, _ = compute(tmp_path, address)
    assert result.output == f"Error: --ray-address {address}: ray.init reached\n"
    assert [call["address"] for call in no_cluster] == [address]


@pytest.mark.parametrize("address", ["auto", "local"])
def test_auto_and_local_are_left_to_ray(tmp_path, no_cluster, monkeypatch, address):
    monkeypatch.setattr(socket, "create_connection", pytest.fail)
    result, _ = compute(tmp_path, address)
    assert result.output == f"Error: --ray-address {address}: ray.init reached\n"
    assert [call["address"] for call in no_cluster] == [address]


@pytest.mark.parametrize("auth_mode", [None, "token"])
def test_a_cluster_that_refuses_the_driver_names_the_auth_token(tmp_path, monkeypatch, auth_mode):
    """Ray 2.59+'s ``ray start --head`` checks an auth token that ``ray.init`` with an explicit address does not
    send unless RAY_AUTH_MODE=token: Ray gives up with a ConnectionError, which gets one line and the hint."""
    def init(**options):
        raise ConnectionError("Failed to connect to Ray cluster at 192.0.2.2:6390")

    monkeypatch.setattr(ray, "init", init)
    if auth_mode:
        monkeypatch.setenv("RAY_AUTH_MODE", auth_mode)
    else:
        monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"127.0.0.1:{server.getsockname()[1]}"
        result, _ = compute(tmp_path, address)
    first = f"Error: --ray-address {address}: Failed to connect to Ray cluster at 192.0.2.2:6390"
    hint = ('; a cluster that checks an auth token (as Ray 2.59+\'s "ray start --head" does) needs RAY_AUTH_MODE=token '
            "here too, with its token in ~/.ray/auth_token or RAY_AUTH_TOKEN")
    assert result.exit_code == 2
    assert result.output == first + ("" if auth_mode else hint) + "\n"


def test_an_empty_address_is_refused(tmp_path, no_cluster):
    result, _ = compute(tmp_path, "")
    assert result.exit_code == 2
    assert result.output == "Error: --ray-address is empty; give HOST:PORT, or leave it out for a local cluster\n"
    assert not no_cluster


def test_the_token_hint_is_only_for_an_address_that_was_given(tmp_path, monkeypatch):
    """'auto' with no cluster running: Ray's own message (over several lines, joined), without the token hint."""
    def init(**options):
        raise ConnectionError("Could not find any running Ray instance.\nPlease specify the one to connect to.")

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    result, _ = compute(tmp_path, "auto")
    assert result.exit_code == 2
    assert result.output == ("Error: --ray-address auto: Could not find any running Ray instance. Please specify the one "
                             "to connect to.\n")
