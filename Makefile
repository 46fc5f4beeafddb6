# The few commands a newcomer needs. Each installs what it needs first.
CARGO ?= cargo
BIN := target/debug
BOXCTL := $(BIN)/boxctl

.PHONY: all deps build demo node-image run-pi test faults bench fuzz lint check-macos fmt clean sdk sdk-check

all: build

deps:
	@scripts/install-deps.sh

build: deps
	$(CARGO) build --workspace --bins

# Build, start the per-user daemon (if it is not running) and run a command in a box.
demo: build
	@image=$$($(BIN)/boxd-test-image) && \
	$(BOXCTL) daemon start && \
	$(BOXCTL) run --name demo "$$image" uname -a && \
	echo "boxd and the box keep running: try '$(BOXCTL) ps', '$(BOXCTL) exec -it demo sh', '$(BOXCTL) rm -f demo', '$(BOXCTL) daemon stop'"

# A Node-capable OCI image layout from registry packages alone (Debian
# trixie minbase + Node 24 from the npm registry); cached, prints its path.
node-image: deps
	@scripts/node-image.sh

# The BoxLite "Run Pi" guide, reproduced through boxd: a Node box boots, pi
# installs from npm, answers, and takes one prompt (from a fake model server
# on loopback: no API key); prints the timings against the guide's.
run-pi: deps
	$(CARGO) build --release --workspace --bins
	@scripts/run-pi.sh

# The BoxLite runtime (from the PyPI wheel, cached) is needed by the tests
# that open a real BoxLite runtime.
# The exec plumbing of the BoxLite engine is also tested against BoxLite's
# fake executions (feature boxlite-test-support), since no VM boots here.
# The remote BoxLite engine's tests (tests/tests/remote.rs) run against a
# real `boxlite serve`, built once from the Rust package registry by
# scripts/boxlite-serve.sh (cached in ~/.cache/boxd): started here in the
# background, waited for by those tests.
test: build
	@mkdir -p target && (scripts/boxlite-serve.sh > /dev/null 2> target/boxlite-serve.log &)
	export BOXLITE_RUNTIME_DIR="$$(scripts/boxlite-runtime.sh)" && \
	$(CARGO) test --workspace && \
	$(CARGO) test -p boxd --features boxlite-test-support engine::boxlite
	@$(MAKE) --no-print-directory faults

# The Python and TypeScript SDKs' generated code (stubs, types, clients,
# the TypeScript dist/) from proto/ with their pinned generators; commit
# what it writes. `make lint` (so CI) runs sdk-check: the committed code
# must be what proto/ makes.
sdk: deps
	@scripts/sdk.sh generate

sdk-check: deps
	@scripts/sdk.sh check

# Faults (a SIGKILLed daemon, killed clients, a full disk, stale files, a
# box's init killed), load, hostile input and the namespace engine's
# isolation, one test at a time, printing what each observed
# (docs/reliability.md; --workspace, so the features and the binaries are
# `make test`'s and nothing is built again); then, when run as root, the isolation suite again
# as an ordinary user with a boxd of its own (scripts/isolation-as-user.sh).
# LOAD_EXECS sets the sequential-exec run (10000).
faults: build
	$(CARGO) test --workspace --test faults --test load --test hostile --test isolation --test host_tools --test escapes -- --test-threads 1 --nocapture
	@scripts/isolation-as-user.sh

# The lifecycle bench compares with podman --runtime runc (installed here by
# scripts/install-bench-deps.sh, not by `make deps`) and builds the Node
# image (make node-image) if it is not cached. BENCH_LIFECYCLE_BUSYBOX and
# BENCH_LIFECYCLE_NODE set its iterations (20 and 10; 0 skips Node).
bench: deps
	@scripts/install-bench-deps.sh
	$(CARGO) build --release --workspace --bins
	$(CARGO) bench --workspace --bench boxd
	$(CARGO) bench --workspace --bench pull
	$(CARGO) bench --workspace --bench lifecycle
	$(CARGO) bench --workspace --bench ports
	$(CARGO) bench --workspace --bench cp
	$(CARGO) bench --workspace --bench mcp
	$(CARGO) bench --workspace --bench sdk
	$(CARGO) bench --workspace --bench remote
	$(CARGO) bench --workspace --bench acp
	$(CARGO) bench --workspace --bench acp_fs
	$(CARGO) bench -p boxd-egress --bench intercept
	$(CARGO) bench --workspace --bench footprint

# Fuzz the JSONL line reader/request parser, the output encoder, request
# validation, the namespace engine's bubblewrap translation, `docker save`
# import, layer unpacking, box archive import and the egress proxy's
# request handling, the ACP proxy's relay, the unpacker of `boxctl cp`, the
# HTTP/2 :authority rewriter (cargo-fuzz on the stable toolchain; FUZZ_SECONDS per
# target, FUZZ_TARGETS to pick; FUZZ_MEMORY_MB caps each run's resident memory
# and any one allocation, and going over is a crash).
FUZZ_SECONDS ?= 300
FUZZ_MEMORY_MB ?= 2048
FUZZ_TARGETS ?= jsonl_request jsonl_output box_request bwrap_args image_import layer_unpack box_archive_import egress_request egress_inside acp_relay cp_unpack authority_rewrite
fuzz:
	command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	cd fuzz && for t in $(FUZZ_TARGETS); do \
	  mkdir -p corpus/$$t && \
	  RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run -O $$t corpus/$$t -- -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=$(FUZZ_MEMORY_MB) -malloc_limit_mb=$(FUZZ_MEMORY_MB) -print_final_stats=1 || exit 1; \
	done

lint: deps
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p boxd-tests --test faults --test load --test hostile --test isolation --test host_tools --test escapes -- -D warnings
	$(CARGO) clippy -p boxd --all-targets --features boxlite-test-support -- -D warnings
	@$(MAKE) --no-print-directory sdk-check

# Type-check (and lint) the macOS-only code from Linux: the XPC shim, and
# the clients. Needs rustup to fetch the target's standard library. The
# daemon is not included: its C dependencies need an Apple toolchain.
check-macos:
	rustup target add aarch64-apple-darwin
	$(CARGO) clippy --target aarch64-apple-darwin -p harness-box-xpc -p boxctl -p harness-box-exec -- -D warnings

fmt:
	$(CARGO) fmt --all

clean:
	$(CARGO) clean
