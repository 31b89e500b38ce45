"""Write the offline Hugging Face hub cache that vLLM's scheduler tests need.

The applicable tests of tests/v1/core/test_scheduler.py build their ModelConfig from
facebook/opt-125m and read only its config.json (architecture, context length, vocabulary);
with HF_HUB_OFFLINE=1 the hub client finds it in this cache. Usage:
vllm_hub_configs.py HF_HOME
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# The fields of facebook/opt-125m's config.json that vLLM's ModelConfig reads.
CONFIGS = {
    "facebook/opt-125m": {
        "architectures": ["OPTForCausalLM"],
        "model_type": "opt",
        "activation_function": "relu",
        "bos_token_id": 2,
        "eos_token_id": 2,
        "pad_token_id": 1,
        "do_layer_norm_before": True,
        "ffn_dim": 3072,
        "hidden_size": 768,
        "max_position_embeddings": 2048,
        "num_attention_heads": 12,
        "num_hidden_layers": 12,
        "torch_dtype": "float16",
        "vocab_size": 50272,
        "word_embed_proj_dim": 768,
    },
}
REVISION = "0" * 40  # any commit hash: refs/main points the offline lookup at it


def write_cache(hf_home: Path) -> None:
    for repo, config in CONFIGS.items():
        root = hf_home / "hub" / ("models--" + repo.replace("/", "--"))
        snapshot = root / "snapshots" / REVISION
        snapshot.mkdir(parents=True, exist_ok=True)
        (snapshot / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        (root / "refs").mkdir(exist_ok=True)
        (root / "refs" / "main").write_text(REVISION)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: vllm_hub_configs.py HF_HOME")
    write_cache(Path(sys.argv[1]))
