# Shortcuts for the README's commands. Nothing here that the README does
# not also show as a plain command.

GO ?= go
IMAGE ?= troupe:dev

.PHONY: build release test image test-docker test-prometheus compose-up compose-down testdata-llama

# Compile everything, and the CLI into bin/troupe with its model tools
# (troupe eval, plot, ...) beside it in bin/troupe-ml.
build:
	$(GO) build ./...
	$(GO) build -o bin/ ./cmd/troupe ./cmd/troupe-ml

# The CLI with its version and VCS revision stamped (troupe version), and
# its model tools beside it.
release:
	scripts/release.sh

# The README's test command.
test:
	$(GO) test ./...

# Regenerate the Llama/Qwen reference models and outputs that
# algorithms/policy's tests compare against, LoRA adapters included (plain PyTorch, Debian's
# python3-torch; the outputs are committed so tests need no PyTorch).
testdata-llama:
	/usr/bin/python3 algorithms/policy/testdata/llama/gen.py
	/usr/bin/python3 algorithms/policy/testdata/llama/gen_lora.py
	/usr/bin/python3 algorithms/policy/testdata/llama/gen_autocast.py
	/usr/bin/python3 algorithms/policy/testdata/llama/gen_padded.py

# The node image, FROM scratch, with the binary and the libraries ldd lists.
image:
	TROUPE_IMAGE=$(IMAGE) deploy/build-image.sh

# The compose cluster and a training job through leader and worker
# faults (needs a Docker engine and docker-compose; skips with a message
# otherwise). .ci/run runs the same when `docker info` answers.
test-docker:
	$(GO) test -tags docker -count=1 -v -timeout 12m ./deploy/...

# Debian's Prometheus scraping a test cluster; the dashboards' queries
# (skips with a message when prometheus is not installed).
test-prometheus:
	$(GO) test -tags prometheus -count=1 -v ./deploy/

# A five-node cluster on this machine (set a token in deploy/cluster.env first).
compose-up: image
	docker-compose -f deploy/compose.yaml up -d

compose-down:
	docker-compose -f deploy/compose.yaml down -v
