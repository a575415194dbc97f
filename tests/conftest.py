import atexit
import fcntl
import os
import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

# No test touches the network: set before anything imports gradio or huggingface_hub.
os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("WORKBENCH_PRESET", "zoo")
# Each test client is a person of its own, told apart by the address a proxy reports
# (tests/helpers/people.py); the servers the suite starts trust that one hop.
os.environ["WORKBENCH_PROXY_HOPS"] = "1"
# The servers the suite starts compute each tab's first view live, as the tests of each tab expect
# to see it computed; tests/e2e/test_first_views.py starts servers that keep them.
os.environ.setdefault("WORKBENCH_FIRST_VIEWS", "off")
# The suite runs two workers on two cores, each starting servers: a server with torch's default of
# one intra-op thread per core oversubscribes the cores, and every op then waits at a barrier for a
# descheduled thread (hub mode's Memorization generation took 16.7 s with two threads and 3.5 s with
# one beside two busy processes; its first view passed 120 s beside a second suite run). The zoo's
# servers use one thread already (backend.core.device.serving_threads); the hub stand-ins' too.
os.environ.setdefault("WORKBENCH_TORCH_THREADS", "1")


def _private_dir(var: str, prefix: str) -> None:
    """Give this test process (each xdist worker is one) a folder of its own for `var`, removed at
    exit: the servers it starts inherit it, so two workers' servers never sweep, quota or overwrite
    each other's visitor folders or caches, and no run writes into the machine's own. An xdist
    worker inherits the folder its controller made (the controller loads this file first), so a
    worker makes its own in place of one a test process made."""
    made = f"WORKBENCH_TESTS_MADE_{var}"
    inherited = os.environ.get(var) and os.environ.get(var) == os.environ.get(made)
    if not os.environ.get(var) or (inherited and os.environ.get("PYTEST_XDIST_WORKER")):
        path = tempfile.mkdtemp(prefix=prefix)
        os.environ[var] = os.environ[made] = path
        atexit.register(shutil.rmtree, path, ignore_errors=True)


_private_dir("WORKBENCH_SESSION_DIR", "wb-test-sessions-")
_private_dir("HF_HOME", "wb-test-hf-home-")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# This process imports gradio too (the api tests build the app in it): the same start as app.py's.
from components.gradio_fixes.stubs import no_stub_rewrites  # noqa: E402

no_stub_rewrites()


def _one_tls_context() -> None:
    """gradio_client opens a new httpx client for every request it makes (two per call, four when
    a client connects), and httpx builds a TLS context for each, reading the whole CA bundle: 43 ms
    of CPU each, even for 127.0.0.1 (three api files: 121 s of CPU without this, 83 s with it). The
    tests' clients share one default context: a context serves any number of connections, from any
    thread."""
    import httpx._config
    import httpx._transports.default as transports

    build, made = httpx._config.create_ssl_context, {}

    def shared(verify=True, cert=None, trust_env=True):
        if verify is not True or cert is not None:
            return build(verify=verify, cert=cert, trust_env=trust_env)
        key = (trust_env, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        if key not in made:
            made[key] = build(verify=True, cert=None, trust_env=trust_env)
        return made[key]

    transports.create_ssl_context = shared


_one_tls_context()

from tests.helpers.people import one_person_per_client  # noqa: E402

one_person_per_client()

ARTIFACTS = ROOT / "test-artifacts"

# In two processes (`pytest -n 2`), the tests that share a server or an in-process app (a folder's
# package fixtures) go to one worker together, and each other test file is a unit of its own: a
# worker that took a whole folder never starts the other's servers again. The units start in this
# order, the longest first, so the other worker fills its time with the short ones.
SHARED_FOLDERS = ("e2e", "api", "hub")
ORDER = ("e2e", "api", "load", "hub", "precompute", "organisms")


def _folder(nodeid: str) -> str:
    parts = nodeid.split("::")[0].split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else ""


def _unit(nodeid: str) -> str:
    folder = _folder(nodeid)
    return folder if folder in SHARED_FOLDERS else nodeid.split("::")[0]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "load":  # the default of `-n N`; an explicit --dist is kept
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByServer(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    config.option.loadscopereorder = False  # keep ORDER, not the units' test counts
    return ByServer(config, log)


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the same order in every worker (stable sort)
        rank = {f: i for i, f in enumerate(ORDER)}
        items.sort(key=lambda it: rank.get(_folder(it.nodeid), len(ORDER)))


def pytest_collection_finish(session):
    from tests.helpers import early_checks

    early_checks.start(session, ROOT)


def pytest_unconfigure(config):
    from tests.helpers import early_checks

    early_checks.stop()


def artifact(name: str) -> Path:
    """A file under test-artifacts/ for the log of a server a test package shares: one per xdist
    worker, since each worker that needs the server starts its own."""
    ARTIFACTS.mkdir(exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    path = Path(name)
    return ARTIFACTS / (f"{path.stem}-{worker}{path.suffix}" if worker else path.name)


@contextmanager
def _machine_share(alone: bool):
    """A test marked `alone` runs while no other test of this suite runs on the machine: not an
    xdist worker's, nor one of a second run of the suite beside this one (another checkout, a
    second pytest): its figures (a first view within 10 s, no browser task over 200 ms, a stop
    within a second) are timings of the app, not of the other tests' load. Every test holds the
    machine lock shared; an `alone` test holds it exclusively. The turnstile, taken by every test
    before the machine lock, keeps a waiting `alone` test from being passed by the others' next
    tests. The locks live in the machine's temporary folder, so every run on the machine sees them."""
    with open(_lock_path("turnstile"), "a") as turnstile, open(_lock_path("machine"), "a") as machine:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        if not alone:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        fcntl.flock(machine, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(machine, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(turnstile, fcntl.LOCK_UN)


# One folder per user of the machine (not per checkout), for the locks of `_machine_share`.
LOCKS = Path(tempfile.gettempdir()) / f"workbench-tests-{os.getuid()}"


def _lock_path(name: str) -> Path:
    LOCKS.mkdir(exist_ok=True)
    return LOCKS / f"{name}.lock"


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """The machine lock is held over a test's whole protocol: the set-up and tear-down of the
    fixtures it is the first or last user of (a package's server starting or stopping, stand-ins
    being written) count as that test's load, so they never run beside another worker's timing
    check. Outside pytest-timeout's wrapper (tryfirst): a wait for the machine is not counted
    against the test's own time limit."""
    with _machine_share(item.get_closest_marker("alone") is not None):
        yield


@pytest.fixture(autouse=True, scope="module")
def _one_browser_per_module():
    """The browser tests of a module share one Chromium (tests/helpers/browser.py), stopped here."""
    yield
    if "tests.helpers.browser" in sys.modules:
        sys.modules["tests.helpers.browser"].close()


@pytest.fixture(autouse=True)
def _fresh_model_checks():
    """Each test checks custom models afresh: the picker remembers checks for minutes, and tests
    rewrite folders under paths a previous test may have checked."""
    from backend.core import picker

    picker.forget()
    yield


def pytest_terminal_summary(terminalreporter, exitstatus):
    """After a failed run, the internal errors the served apps logged (their tracebacks live only in
    test-artifacts/*.log, which a CI run's printout does not include)."""
    if exitstatus == 0 or not ARTIFACTS.is_dir():
        return
    for log in sorted(ARTIFACTS.glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()
        starts = [i for i, line in enumerate(lines) if "internal error in" in line]
        for i in starts[:3]:
            terminalreporter.write_sep("-", f"{log.name}: line {i + 1} of {len(starts)} internal error(s)")
            terminalreporter.write_line("\n".join(line[:300] for line in lines[i : i + 40]))
