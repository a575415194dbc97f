import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from backend.core.precompute import ShardedJob, chunks, merge_topk
from tests.conftest import ROOT
from tests.precompute import synthetic_job as job

SCRIPT = ROOT / "tests" / "precompute" / "synthetic_job.py"


class Solo:
    process_index, num_processes, is_main_process = 0, 1, True

    def wait_for_everyone(self):
        pass


def torchrun(nproc, *args, port):
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        str(nproc),
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(port),
        str(SCRIPT),
        *map(str, args),
    ]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_chunks_and_topk_tiebreak():
    assert chunks(25, 10) == [(0, 10), (10, 20), (20, 25)] and chunks(0, 4) == []
    with pytest.raises(ValueError):
        chunks(5, 0)
    v, i = merge_topk(
        [torch.tensor([[1.0, 3.0]]), torch.tensor([[3.0, 2.0]])], [torch.tensor([[9, 4]]), torch.tensor([[2, 5]])], 3
    )
    assert v.tolist() == [[3.0, 3.0, 2.0]] and i.tolist() == [[2, 4, 5]]


@pytest.mark.timeout(600)
def test_two_processes_equal_one_exactly_and_resume(tmp_path):
    from tests.helpers.server import free_port

    solo = ShardedJob("synthetic", tmp_path / "solo", job.N, 10, job.compute, job.merge).run(Solo())
    x = job.data(0, job.N)
    assert torch.allclose(solo["sum"], x.sum(0), atol=1e-5)
    assert torch.equal(solo["top_v"], torch.topk(x.T, job.K).values)
    assert torch.equal(x.T.gather(1, solo["top_i"]), solo["top_v"])

    out = torchrun(2, tmp_path / "two", port=free_port())
    assert out.returncode == 0, out.stderr[-2000:]
    two = load_file(str(tmp_path / "two" / "synthetic.safetensors"))
    for k in solo:
        assert torch.equal(solo[k], two[k]), k  # bit-identical, not merely close

    # Interrupted after 2 chunks per process, then resumed: the same result, no chunk redone.
    out = torchrun(2, tmp_path / "resumed", "--stop-after", 2, port=free_port())
    assert out.returncode != 0
    parts = sorted((tmp_path / "resumed" / "parts").glob("*.safetensors"))
    assert len(parts) == 4 and not (tmp_path / "resumed" / "synthetic.safetensors").exists()
    mtimes = {p.name: p.stat().st_mtime_ns for p in parts}
    out = torchrun(2, tmp_path / "resumed", port=free_port())
    assert out.returncode == 0, out.stderr[-2000:]
    resumed = load_file(str(tmp_path / "resumed" / "synthetic.safetensors"))
    assert all(torch.equal(solo[k], resumed[k]) for k in solo)
    assert all((tmp_path / "resumed" / "parts" / n).stat().st_mtime_ns == t for n, t in mtimes.items())
