"""A real neural model as the Observer and Reflector of a deployed om: SmolLM2-135M-Instruct on a loopback
llama.cpp server, reached through litellm as any OpenAI-compatible server is (``openai/<alias>`` with
``modelSettings.apiBase``), by a real ``om serve`` and ``om worker`` over Postgres.

Its answers are poor (it copies, invents and ignores the format), which is the point: the path a real
deployment takes, with real latency and output that does not follow the prompt, must still end every cycle
in a commit or a recorded failure, lose no message and observe none twice. Run by scripts/real-model.sh,
which installs the server and the model, and by scripts/test.sh under CI=true, which tries that install
first; skipped without them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testing.generator import generate
from testing.postgres import scratch_postgres
from testing.real_model import gguf_path, llama_server, run_conversation

pytestmark = [pytest.mark.real_model, pytest.mark.integration, pytest.mark.timeout(3000)]

GGUF = gguf_path()


@pytest.mark.skipif(GGUF is None, reason="no model file: run scripts/real-model.sh")
def test_a_real_model_observes_and_reflects_without_losing_a_message(tmp_path: Path) -> None:
    pytest.importorskip("xllamacpp")
    assert GGUF is not None
    conversation = generate("help", 7, 16)
    with (
        llama_server(tmp_path / "llama.log", GGUF) as api_base,
        scratch_postgres(prefix="om_real_model") as url,
    ):
        run = run_conversation(url, api_base, conversation.messages(), tmp_path, settle_s=1200)

    assert run.seqs == list(range(1, run.messages + 1)), "every message appended once, in order"
    observations = [c for c in run.cycles if c.kind != "reflect"]
    assert observations, "the conversation crossed the buffer interval: the Observer ran"
    for cycle in run.cycles:
        assert cycle.end in {"committed", "failed", "stale", "discarded"}, cycle
        if cycle.end == "failed":
            assert cycle.error, f"a failure records why: {cycle}"
        if cycle.end in {"committed", "failed"} and cycle.usage.get("calls"):
            # the parser judged every answer the model gave
            assert cycle.usage["verdicts"], cycle
    assert not run.overlaps, f"messages observed twice: {run.overlaps}"
    committed = [c for c in observations if c.end == "committed"]
    spans = sorted((c.from_seq, c.to_seq) for c in committed)
    assert all(a is not None and b is not None and 1 <= a <= b <= run.messages for a, b in spans)
    assert run.verdicts and set(run.verdicts) <= {"parsed", "repaired", "degenerate", "empty"}
    assert run.log_tracebacks == 0
