"""The model: a Llama-style decoder on the shared paged-attention core, with random or real
(SmolLM2-135M-Instruct, from a GGUF file) weights."""
