"""Request generators: each workload family is a pure function of (params, seed, token space).

`workloads.base.generate(params, seed, token_space)` validates the params and dispatches through
the family registry (`FAMILIES`, filled below); `workloads.bounds` computes theoretical hit rates from the
generated token ids. Nothing here imports `engines` or `harness`.
"""

from workloads import (
    bailian,
    dataset,
    fewshot,
    mix,
    multiturn,
    parallel,
    prompts,
    rag,
    system_prompt,
    trace,
    unique,
)
from workloads.base import FAMILIES, Family

# registry: every workload family (name -> params schema, generator)
FAMILIES.add("bailian", Family(bailian.BailianParams, bailian.generate_bailian))
FAMILIES.add("dataset", Family(dataset.DatasetParams, dataset.generate_dataset))
FAMILIES.add("fewshot", Family(fewshot.FewshotParams, fewshot.generate_fewshot))
FAMILIES.add("mix", Family(mix.MixParams, mix.generate_mix))
FAMILIES.add("multiturn", Family(multiturn.MultiturnParams, multiturn.generate_multiturn))
FAMILIES.add("parallel", Family(parallel.ParallelParams, parallel.generate_parallel))
FAMILIES.add("prompts", Family(prompts.PromptsParams, prompts.generate_prompts))
FAMILIES.add("rag", Family(rag.RagParams, rag.generate_rag))
FAMILIES.add(
    "system_prompt", Family(system_prompt.SystemPromptParams, system_prompt.generate_system_prompt)
)
FAMILIES.add("trace", Family(trace.TraceParams, trace.generate_trace))
FAMILIES.add("unique", Family(unique.UniqueParams, unique.generate_unique))
