"""llama.cpp's own OpenAI-compatible HTTP server, run by the tests as a separate process.

    python tests/llama_server.py PORT API_KEY MODEL_ALIAS

It serves the small embedded GGUF (assembled by models.embedded_gguf_path) through
the xllamacpp wheel's llama.cpp server: the same /v1/chat/completions, /v1/models,
/props and /tokenize that a `llama-server` on another machine offers. It prints
"ready" once it listens and runs until killed.
"""

import sys
import time
from pathlib import Path

import xllamacpp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import models  # noqa: E402

port, key, alias = int(sys.argv[1]), sys.argv[2], sys.argv[3]
params = xllamacpp.CommonParams()
params.model.path = str(models.embedded_gguf_path("qwen2.5-coder-0.5b"))
params.model_alias = {alias}
params.n_ctx = 4096
params.n_parallel = 1
params.cpuparams.n_threads = params.cpuparams_batch.n_threads = 2
params.hostnames = ["127.0.0.1"]
params.port = port
params.api_keys = [key]
params.verbosity = 0
server = xllamacpp.Server(params)
print("ready", server.listening_address, flush=True)
while True:
    time.sleep(3600)
