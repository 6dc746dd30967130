// Package hf reads and writes Hugging Face model directories of the
// Llama/Qwen decoder family (model_type llama, mistral, qwen2, qwen3;
// SmolLM and Llama 3.x are "llama"): config.json, safetensors weights in
// one file or in shards with model.safetensors.index.json, and the list of
// tensors such a checkpoint holds.
//
// It knows formats, not models: algorithms/policy builds the model from a
// Config and reads each tensor with Checkpoint.ReadF32.
//
//	cfg, err := hf.LoadConfig(dir)              // defaults as transformers applies them
//	ck, err := hf.Open(dir)                     // mmap, read-only; headers validated
//	defer ck.Close()
//	if err := hf.CheckTensors(cfg, ck).Err(); err != nil { ... }
//	for _, t := range hf.ExpectedTensors(cfg) {
//		err := ck.ReadF32(t.Name, t.Shape, dst) // F32, F16 or BF16 into float32
//	}
//	err = hf.SaveModel(out, cfg, tensors, hf.SaveOptions{DType: hf.BF16, MaxShardBytes: 2 << 30})
//
// What SaveModel writes opens in transformers unchanged: config.json keeps
// every field it was read with (only the dtype fields and fields changed in
// the Config are rewritten), the safetensors files carry {"format": "pt"},
// and shards and index are named and laid out as save_pretrained does.
//
// The PyTorch reference in ../testdata/llama (gen.py, `make testdata-llama`)
// writes small model directories of every supported shape with this
// package's conventions checked against them in hf's tests.
package hf
