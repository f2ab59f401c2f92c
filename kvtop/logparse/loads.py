"""Group events into model loads and build the ``kvtop inspect-log --json`` document.

The document's shape and the conventions behind it are those of the corpus oracles
(``tests/fixtures/logs/expected/README`` = ``corpus/expected/README.md``):

- A load starts at a runner spawn with ``--model`` (``runner_started``), a load request, a
  scheduler decision (``offload`` estimate, ``loading first model``, ``new model will fit
  … loading``, ``loading model "model layers"``), or the first llama.cpp model/context/
  allocation line. Later lines of the same runner join it: fit/alloc/commit requests,
  repeated identical estimates, ``llama runner started``, ``loaded runners``.
- A llama.cpp model-load line (``loaded meta data … from``, ``using device``, ``srv
  load_model: loading``, ``llama.cpp: loading model from``, and the first lines of a model read
  that name no file: ``llama_model_loader: Dumping metadata`` / ``- kv   0:``, ``print_info: file
  format`` / ``arch``, ``load_tensors: loading model tensors``) starts a new load only when the
  current one already has context/allocation lines or has finished starting; so a load that
  fails before its first buffer line is a load, with its failure.
- Allocations: lines for the same component and device add up within one context creation
  (an iSWA model prints two KV lines per device). When an allocation sequence is printed
  again (a fit/probe pass, then the real load: a weights or compute line for a device
  already seen, or a component earlier in weights → KV → compute order), the later
  sequence replaces the earlier one.
- Interleaved-SWA models build two caches (``creating non-SWA KV cache`` then ``creating SWA KV
  cache``, each with its size line): the context, slots and K/V types are the non-SWA cache's, the
  KV bytes are both caches' (the KV buffer lines' total when a size line is missing).
- A llama-server fit pass (``common_params_fit_impl: … N layers (M overflowing)``) runs before
  the model is loaded: the ``llama_model_loader`` line after it is the same load.
- The 2024 server's ``initializing slots`` / ``new slot`` lines give slots and per-slot context.
- Flash attention: a resolution by the runner wins (``flash_attn = 0|1``, ``Flash Attention
  was auto, set to …``, ``resolve_fused_ops``, ``forcing off``); otherwise Ollama's decision
  (``--flash-attn``, ``enabling flash attention``, ``FlashAttention:true|Enabled``, ``flash
  attention enabled but not supported by model|gpu`` = disabled); a
  complete A/B1 command line without ``--flash-attn`` means disabled; ``auto`` that is never
  resolved stays None.
- Events are counted per incident: consecutive OOM, load-failure, eviction, unload,
  forced-off or fallback lines of one load give one event; but every allocator failure line
  (``cudaMalloc failed``, ``hipMalloc failed``, ``unable to allocate``: one try of a fit/alloc
  loop) is an OOM of its own, the lines after it that report the same try joining it.
"""

from __future__ import annotations

# This module is the rules above; the code is beside it, re-exported here for this module's callers:
# a load and its builder (load_build), the grouping (load_grouping), the inspect-log document
# (inspect_doc), the streaming grouper (load_stream).
from kvtop.logparse.inspect_doc import KV_ROUNDING_BYTES as KV_ROUNDING_BYTES
from kvtop.logparse.inspect_doc import event_json as event_json
from kvtop.logparse.inspect_doc import inspect_events as inspect_events
from kvtop.logparse.inspect_doc import inspect_lines as inspect_lines
from kvtop.logparse.inspect_doc import kv_coverage as kv_coverage
from kvtop.logparse.inspect_doc import load_json as load_json
from kvtop.logparse.load_build import COMPONENTS as COMPONENTS
from kvtop.logparse.load_build import Load as Load
from kvtop.logparse.load_build import is_cpu_device as is_cpu_device
from kvtop.logparse.load_grouping import INCIDENT_GAP_S as INCIDENT_GAP_S
from kvtop.logparse.load_grouping import INCIDENT_KINDS as INCIDENT_KINDS
from kvtop.logparse.load_grouping import REPORTED_KINDS as REPORTED_KINDS
from kvtop.logparse.load_grouping import LoadGrouper as LoadGrouper
from kvtop.logparse.load_grouping import group_loads as group_loads
from kvtop.logparse.load_stream import FINDING_KINDS as FINDING_KINDS
from kvtop.logparse.load_stream import MAX_FINDING_EVENTS as MAX_FINDING_EVENTS
from kvtop.logparse.load_stream import MAX_LOAD_REQUESTS as MAX_LOAD_REQUESTS
from kvtop.logparse.load_stream import REQUEST_KINDS as REQUEST_KINDS
from kvtop.logparse.load_stream import LoadStream as LoadStream
