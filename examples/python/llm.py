# The vLLM-style layer: generate with SamplingParams, capture activations to numpy, steer with a
# numpy vector. Usage: python examples/python/llm.py [MODEL=models/stories260K] (a folder or .gguf)
import sys

import numpy as np

from undercurrent import LLM, SamplingParams

prompts = ["Once upon a time", "The little dog"]
with LLM(sys.argv[1] if len(sys.argv) > 1 else "models/stories260K") as llm:
    greedy = SamplingParams(max_tokens=12, temperature=0.0)
    for out in llm.generate(prompts, greedy):
        print(f"{out.prompt!r} -> {out.outputs[0].text!r} ({out.outputs[0].finish_reason})")

    # The residual stream after block 2 at every generated token, and at the last prompt token.
    points = [{"name": "resid", "layers": [2], "tensor_type": "residual_stream", "position": "generated[*]"},
              {"name": "last", "layers": [2], "tensor_type": "residual_stream", "position": "prompt[-1]"}]
    acts = llm.capture(prompts, points, greedy)
    print("captured", acts.values.shape, "rows; generated rows of prompt 0:", acts.get("resid", prompt_index=0).shape)

    # Steer with the mean difference of the two prompts' last-token activations.
    last = acts.get("last")
    direction = (last[1] - last[0]).astype(np.float32)
    steer = SamplingParams(max_tokens=12, temperature=0.0,
                           steering_vectors={"residual_stream": {2: {"vector": direction, "scale": 2.0}}})
    (steered,) = llm.generate(prompts[0], steer)
    print(f"steered: {steered.outputs[0].text!r}")
