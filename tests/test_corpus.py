"""The differential corpus (tests/corpus/): every model of every family on ref and cpu, on cpu with
float16 inputs and outputs (CompileOptions.fp16_io), and, marked `gpu`, on the gpu target in float32,
float16 and float16 I/O, against ONNX Runtime at its defaults.

Models are built lazily and cached on disk (tests/corpus/build.py); an entry whose builder needs a
package that is not installed skips, naming it. Criteria: tests/corpus/compare.py. A known failure
is xfail(strict) with its cause, so the test flips to an error once the fix lands.
"""

from __future__ import annotations

import importlib.util

import pytest

from tests.corpus import ENTRIES
from tests.corpus.build import CorpusUnavailable
from tests.corpus.compare import TARGETS, check, degenerate, reference

pytestmark = pytest.mark.slow

# (entry, target) -> the cause found; each is xfail(strict=True)
KNOWN: dict[tuple[str, str], str] = {}


def _cuda() -> bool:
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("triton") is None:
        return False
    import torch

    return torch.cuda.is_available()


def _params():
    for name in ENTRIES:
        for target in TARGETS:
            marks = [pytest.mark.gpu] if target.startswith("gpu") else []
            if (name, target) in KNOWN:
                marks.append(pytest.mark.xfail(strict=True, reason=KNOWN[name, target]))
            yield pytest.param(name, target, marks=marks, id=f"{name}-{target}")


@pytest.fixture(scope="module")
def references():
    return {}


@pytest.mark.parametrize("name, target", list(_params()))
def test_corpus_model_matches_ort(name, target, references):
    if target.startswith("gpu") and not _cuda():
        pytest.skip("needs an NVIDIA GPU (CUDA)")
    entry = ENTRIES[name]
    if name not in references:
        try:
            references[name] = reference(entry)
        except CorpusUnavailable as e:
            references[name] = e
    ref = references[name]
    if isinstance(ref, CorpusUnavailable):
        pytest.skip(str(ref))
    assert not degenerate(ref.expected), f"{name}: ONNX Runtime's outputs are constant, the comparison checks nothing"
    verdict = check(entry, ref, target)
    assert verdict.ok, f"{name} on {target}: {verdict.detail}"
