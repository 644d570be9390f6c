"""An in-memory transformers model as ProbedModel's / LLM's model: written to a temporary
safetensors folder (with its tokenizer), served from there, the folder removed at close. In CI
(no transformers) a duck-typed model whose save_pretrained copies the bundled HF folder drives
the same path; where transformers is installed, a real PreTrainedModel is checked against
transformers' own greedy generation."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest

from undercurrent import LLM, ProbedModel, ProbingError, SamplingParams


class SavedCopy:
    """Quacks like a PreTrainedModel: save_pretrained writes a copy of an HF folder."""

    def __init__(self, folder: str, with_tokenizer: bool = True) -> None:
        self.folder = folder
        self.config = {"copied_from": folder}
        self.with_tokenizer = with_tokenizer
        self.name_or_path = ""
        self.saved_to: list[str] = []

    def save_pretrained(self, target: str, safe_serialization: bool = True) -> None:
        assert safe_serialization
        self.saved_to.append(target)
        for name in os.listdir(self.folder):
            if name.startswith("tokenizer") and not self.with_tokenizer:
                continue
            if os.path.isfile(os.path.join(self.folder, name)):
                shutil.copyfile(os.path.join(self.folder, name), os.path.join(target, name))


def test_a_duck_typed_model_object_generates_what_its_folder_generates(tiny_model):
    with ProbedModel.from_pretrained(tiny_model, threads=1) as direct:
        want = direct.generate(["Once upon a time", "The dog"], max_new_tokens=12)
    obj = SavedCopy(tiny_model)
    with ProbedModel.from_pretrained(obj, threads=1) as model:
        got = model.generate(["Once upon a time", "The dog"], max_new_tokens=12)
        assert len(obj.saved_to) == 1 and os.path.isdir(obj.saved_to[0])
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    assert [o.text for o in got] == [o.text for o in want]
    assert not os.path.exists(obj.saved_to[0])  # removed at close


def test_llm_takes_a_model_object_and_its_tokenizer_from_its_source_folder(tiny_model):
    obj = SavedCopy(tiny_model, with_tokenizer=False)
    obj.name_or_path = tiny_model  # as from_pretrained(folder) sets it
    with LLM(tiny_model, threads=1) as direct:
        want = direct.generate("Once upon a time", SamplingParams(max_tokens=10, temperature=0))
    with LLM(obj, threads=1) as llm:
        got = llm.generate("Once upon a time", SamplingParams(max_tokens=10, temperature=0))
    assert got[0].outputs[0].token_ids == want[0].outputs[0].token_ids
    assert not os.path.exists(obj.saved_to[0])


def test_a_model_object_without_a_tokenizer_is_refused_and_leaves_nothing(tiny_model):
    obj = SavedCopy(tiny_model, with_tokenizer=False)
    with pytest.raises(ProbingError, match="tokenizer="):
        ProbedModel.from_pretrained(obj)
    assert not os.path.exists(obj.saved_to[0])


def test_a_tokenizer_path_is_accepted_for_a_model_object(tiny_model):
    obj = SavedCopy(tiny_model, with_tokenizer=False)
    with ProbedModel.from_pretrained(obj, tokenizer=str(Path(tiny_model) / "tokenizer.model"), threads=1) as m:
        assert m.generate("Once upon a time", max_new_tokens=4).token_ids


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None or importlib.util.find_spec("torch") is None,
                    reason="needs torch and transformers (not installed in CI): the duck-typed tests above "
                    "drive the same code path")
def test_a_transformers_model_object_generates_transformers_greedy_tokens(tiny_model):
    import torch
    import transformers

    hf = transformers.AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    with LLM(hf, threads=1) as llm:  # the tokenizer: from the folder hf was loaded from
        out = llm.generate("Once upon a time", SamplingParams(max_tokens=12, temperature=0, ignore_eos=True))
    prompt_ids = out[0].prompt_token_ids
    with torch.no_grad():
        ref = hf.generate(torch.tensor([prompt_ids]), max_new_tokens=12, min_new_tokens=12, do_sample=False)
    assert out[0].outputs[0].token_ids == ref[0, len(prompt_ids):].tolist()
