# Thin wrapper: deps, build, test, demo, bench, lint. See README.md.
LUA_VERSION ?= 5.4
# LUA_VERSION=jit: LuaJIT (OpenResty's luajit2, the one nginx's Lua module uses)
LUA_PC      := $(if $(filter jit,$(LUA_VERSION)),luajit,lua$(LUA_VERSION))
LUA         ?= $(LUA_PC)
# Without pkg-config (Debian's build-essential does not bring it), the
# headers' Debian directory: LuaJIT's are in luajit-2.1, not luajit.
LUA_INCDIR  := $(firstword $(wildcard $(if $(filter jit,$(LUA_VERSION)),/usr/include/luajit-2.1 \
	/usr/include/luajit-2.0) /usr/include/$(LUA_PC)) /usr/include/$(LUA_PC))
LUA_CFLAGS  ?= $(shell pkg-config --cflags $(LUA_PC) 2>/dev/null || echo -I$(LUA_INCDIR))
# The library's name, for the test programs and fuzz targets that link Lua
# (the core does not): Debian's LuaJIT is libluajit-5.1.so.
LUA_LIBNAME := $(if $(filter jit,$(LUA_VERSION)),luajit-5.1,lua$(LUA_VERSION))
LUA_LIBS    ?= $(shell pkg-config --libs $(LUA_PC) 2>/dev/null || echo -l$(LUA_LIBNAME))
HIREDIS_LIBS ?= $(shell pkg-config --libs hiredis 2>/dev/null || echo -lhiredis)
SSL_LIBS    ?= $(shell pkg-config --libs openssl 2>/dev/null || echo -lssl -lcrypto)
BUILD       ?= build
CC          ?= cc
CFLAGS      ?= -O2 -g
WARN        := -std=c99 -Wall -Wextra -Werror -pedantic -Wno-overlength-strings
# The C core by layer (docs/development.md, Layout): the module and what
# every layer shares in csrc/, then protocol/, topology/, connection/ and
# drivers/; every folder is on the include path.
CSRC_DIRS   := csrc csrc/protocol csrc/topology csrc/connection csrc/drivers
CSRC_INC    := $(addprefix -I,$(CSRC_DIRS))
SRCS        := $(foreach d,$(CSRC_DIRS),$(wildcard $(d)/*.c))
HDRS        := $(foreach d,$(CSRC_DIRS),$(wildcard $(d)/*.h))
CORE        := $(BUILD)/redlock/core.so
# The Redis scripts: scripts/NAME.lua (parts in scripts/parts/), embedded
# by tools/embed.sh into $(GEN_H), which csrc/protocol/script.c includes (and
# $(GEN)/scripts/, the composed scripts make lint checks).
GEN         := $(BUILD)/gen
GEN_H       := $(GEN)/scripts_gen.h
SCRIPTS     := $(wildcard scripts/*.lua scripts/parts/*.lua)

.PHONY: all deps build build-tests build-jit dist test check demo clean lint fuzz fuzz-build docs \
	bench bench-deps bench-instructions bench-client-instructions bench-redlock bench-contended bench-nginx bench-nginx-uncontended bench-server bench-tls bench-cluster bench-replicas \
	bench-sentinel bench-bins bench-report \
	test-unit test-lint test-m32 test-sanitize test-valgrind test-fuzz-smoke test-matrix test-servers \
	torture test-torture-smoke
all: build
# What a user needs: the core (`luarocks make` builds it too).
build: $(CORE)
# What the specs need besides (spec/01, 04, 06, 22): the test targets
# build it.
build-tests: $(BUILD)/tests/token_fork $(BUILD)/tests/encode_bound $(BUILD)/tests/forktest.so \
	$(BUILD)/tests/topo_test $(BUILD)/tests/switch_proxy $(BUILD)/tests/hold_proxy
test check test-unit test-valgrind test-servers: build-tests

# (the directories too: a script added or removed changes them)
$(GEN_H): $(SCRIPTS) scripts scripts/parts tools/embed.sh
	sh tools/embed.sh $(GEN)

# `luarocks make` builds this too (redlock-scm-1.rockspec, BUILD=build/rock)
$(CORE): $(SRCS) $(HDRS) $(GEN_H) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -pthread -fPIC -fvisibility=hidden $(LUA_CFLAGS) $(CSRC_INC) -I$(GEN) -shared -o $@ $(SRCS) $(HIREDIS_LIBS) $(SSL_LIBS) $(LDFLAGS)

# A C program for spec/01: tokens after fork() (see csrc/token.h).
$(BUILD)/tests/token_fork: spec/c/token_fork.c csrc/token.c csrc/token.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -pthread $(CSRC_INC) -o $@ spec/c/token_fork.c csrc/token.c $(LDFLAGS)

# A C program for spec/01: the encoder's size check, with made-up lengths.
$(BUILD)/tests/encode_bound: spec/c/encode_bound.c csrc/protocol/resp.c csrc/protocol/resp.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) $(CSRC_INC) -o $@ spec/c/encode_bound.c csrc/protocol/resp.c $(LDFLAGS)

# A C program for spec/01: the topology core fed replies, no sockets.
TOPO_SRCS   := csrc/topology/topo.c csrc/topology/wait.c csrc/protocol/slot.c csrc/protocol/resp.c \
	csrc/error.c
$(BUILD)/tests/topo_test: spec/c/topo_test.c $(TOPO_SRCS) csrc/topology/topo.h csrc/topology/wait.h \
	csrc/protocol/slot.h csrc/protocol/resp.h csrc/defaults.h csrc/error.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) $(LUA_CFLAGS) $(CSRC_INC) -o $@ spec/c/topo_test.c $(TOPO_SRCS) $(HIREDIS_LIBS) $(LUA_LIBS) $(LDFLAGS)

# A C program for spec/22: a proxy that moves its clients to another
# server, their connections kept.
$(BUILD)/tests/switch_proxy: spec/c/switch_proxy.c spec/c/proxy_io.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -o $@ spec/c/switch_proxy.c $(LDFLAGS)

# A C program for spec/26: a proxy that holds back what clients send on
# some connections, then forwards it late.
$(BUILD)/tests/hold_proxy: spec/c/hold_proxy.c spec/c/proxy_io.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -o $@ spec/c/hold_proxy.c $(LDFLAGS)

# A Lua module for spec/04: fork() a process that has used a client.
$(BUILD)/tests/forktest.so: spec/c/forktest.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -fPIC $(LUA_CFLAGS) -shared -o $@ spec/c/forktest.c $(LDFLAGS)

# What make test needs from Debian (all but bench's and docs');
# deps-TARGET: one target's (which needs which: sh tools/deps.sh --list).
deps:
	@sh tools/deps.sh
deps-%:
	@sh tools/deps.sh $*

# Every suite CI runs (tools/test-all.sh): the specs under Lua 5.4 against
# an ASan+UBSan build, the core's specs under valgrind, the C at 32 bits, a
# short fuzz run, lint, the specs under the other interpreters
# (test-matrix), and against every server build (test-servers); about 10
# minutes on 2 cores. Ends with "N passed, M failed".
test: deps build build-jit
	@sh tools/test-all.sh

# Just the specs under Lua 5.4, 6 files at once (JOBS=N for more or fewer):
# the quick check while developing, 2 to 3 minutes.
check test-unit: deps build build-jit
	@sh spec/run.sh

lint test-lint: deps $(GEN_H)
	@GEN=$(GEN) sh tools/lint.sh

# The C where size_t and long are 32 bits: csrc/ compiled with -m32, the
# encoder's size check run there (under qemu-i386 if the kernel runs no i386).
test-m32: deps $(GEN_H)
	@CC="$(CC)" WARN="$(WARN)" BUILD="$(BUILD)" GEN="$(GEN)" sh tools/test-m32.sh

# The specs against an ASan+UBSan build of the core, loaded into the stock
# lua5.4 with the sanitizer runtimes preloaded; leaks are errors. (The
# default build too: spec/74's client under libfaketime, which cannot run
# beside those runtimes, loads it.)
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
test-sanitize: deps build build-jit
	@$(MAKE) -s BUILD=build/sanitize CFLAGS="-O1 -g $(SAN_FLAGS)" LDFLAGS="$(SAN_FLAGS)" build build-tests
	@REDLOCK_BUILD=build/sanitize \
	LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)" \
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	sh spec/run.sh

# The core's specs under valgrind, with the collector running all the time
# (REDLOCK_GC_STRESS: see spec/helper.lua).
VALGRIND := valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite
VALGRIND_SPECS ?= spec/01-core_spec.lua spec/02-options_spec.lua spec/03-lock_spec.lua \
	spec/04-connection_spec.lua spec/30-renew_spec.lua spec/71-pitfalls_spec.lua
test-valgrind: deps build
	@REDLOCK_GC_STRESS=1 LUA="$(VALGRIND) $(LUA)" sh spec/run.sh $(VALGRIND_SPECS)

# libFuzzer targets (clang): the RESP reply conversion and the URL parser.
FUZZ_SECONDS ?= 60
FUZZ_FLAGS := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
fuzz-build: $(BUILD)/fuzz/reply_fuzz $(BUILD)/fuzz/url_fuzz
$(BUILD)/fuzz/reply_fuzz: fuzz/reply_fuzz.c csrc/protocol/reply.c csrc/protocol/reply.h csrc/compat.h
	@mkdir -p $(dir $@)
	clang $(FUZZ_FLAGS) $(LUA_CFLAGS) $(CSRC_INC) -o $@ fuzz/reply_fuzz.c csrc/protocol/reply.c $(LUA_LIBS) $(HIREDIS_LIBS)
$(BUILD)/fuzz/url_fuzz: fuzz/url_fuzz.c csrc/compat.h csrc/defaults.c csrc/defaults.h
	@mkdir -p $(dir $@)
	clang $(FUZZ_FLAGS) $(LUA_CFLAGS) -DREDLOCK_LUA_DIR='"$(CURDIR)/lua"' -o $@ fuzz/url_fuzz.c csrc/defaults.c $(LUA_LIBS)
fuzz: deps fuzz-build
	@BUILD=$(BUILD) sh tools/fuzz.sh $(FUZZ_SECONDS)
test-fuzz-smoke: deps fuzz-build
	@BUILD=$(BUILD) sh tools/fuzz.sh 15

# The source rock of redlock.VERSION and a manifest, in $(BUILD)/dist:
# `luarocks install --only-server=$(BUILD)/dist redlock` (tools/dist.sh).
dist: deps-dist
	@sh tools/dist.sh $(BUILD)/dist

# The core for nginx's LuaJIT, which spec/41-openresty_spec.lua loads.
JIT_BUILD   ?= build/jit
build-jit:
	@$(MAKE) --no-print-directory LUA_VERSION=jit BUILD=$(JIT_BUILD) build

# Every spec under Lua 5.1, 5.2, 5.3, 5.4 and LuaJIT, each with its own
# build/<version>/; ends with one combined "N passed, M failed".
test-matrix: deps
	@sh tools/matrix.sh

# The core, legacy, Redlock, fences, renewal and waiting specs under Lua 5.4
# against every server build of $(REDLOCK_TEST_SERVERS) (default
# ../shared/servers: Redis 2.4 to 7.4, Valkey); one line "skipped" without.
test-servers: deps build
	@sh tools/test-servers.sh

demo: deps-demo build
	@sh examples/demo.sh

# The randomized fault run (torture/run.sh): a workload, a nemesis and a
# checker over the whole history, per mode (MODE: one, replicas,
# sentinel, cluster, redlock, legacy, nginx, a comma-separated list, or
# all), DURATION seconds each, SEED drawn when not given (printed:
# `make torture SEED=... MODE=... DURATION=...` replays the schedule).
# Writes the results table of docs/guarantees.md when DURATION >= 600
# (RECORD=1 or 0 says otherwise). Needs root (network namespaces).
torture: deps build build-jit
	@SEED="$(SEED)" MODE="$(MODE)" DURATION="$(DURATION)" RECORD="$(RECORD)" sh torture/run.sh

# The seeded smoke of it that `make test` runs: every mode once, briefly
# (skipped, in one line, without ../shared's servers, libfaketime or root).
TORTURE_SMOKE_SEED ?= 45
TORTURE_SMOKE_SECONDS ?= 12
test-torture-smoke: deps build build-jit
	@TORTURE_SKIP_MISSING=1 SEED=$(TORTURE_SMOKE_SEED) MODE=all DURATION=$(TORTURE_SMOKE_SECONDS) RECORD=0 sh torture/run.sh

# Benchmarks: never part of `make test`. Other benchmark targets join by
# adding themselves to BENCH_EXTRA; plain cases go in bench/cases/ instead.
FLOOR       := $(BUILD)/bench/floor
BENCH_BIN   := $(BUILD)/bench
BENCH_EXTRA ?= bench-redlock bench-contended bench-nginx bench-nginx-uncontended bench-server bench-tls bench-cluster bench-replicas

$(FLOOR): bench/floor.c csrc/protocol/scripts.h $(GEN_H) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -I$(GEN) $(CSRC_INC) -o $@ bench/floor.c $(HIREDIS_LIBS) $(LDFLAGS)

bench-deps:
	@sh tools/deps.sh bench

# LUA_VERSION=jit BUILD=build/jit: the same cases under LuaJIT. Every case
# against the floor in two regimes (server on CPU 1 and client on CPU 0;
# both on CPU 0), with the server's CPU per op; BENCH_ARGS="--regime split"
# and the rest: bench/bench.lua.
bench: bench-deps build $(FLOOR)
	@LUA="$(LUA)" REDLOCK_BUILD="$(BUILD)" REDLOCK_FLOOR="$(FLOOR)" sh bench/run.sh $(BENCH_ARGS)
	@for t in $(BENCH_EXTRA); do $(MAKE) --no-print-directory $$t || exit 1; done

# The benchmarks whose figures README.md and docs/benchmarks.md show, run,
# and their tables written there (tools/bench-report.sh: 15-20 minutes;
# REPORT="contended nginx" runs only those, the others' figures kept in
# bench/figures/).
bench-report: bench-deps build build-jit $(FLOOR)
	@sh tools/bench-report.sh $(REPORT)

# The HTML reference from the LDoc comments (config.ld), into doc/html
# (git-ignored). Debian's ldoc needs lua-discount for markdown.
docs:
	@sh tools/deps.sh docs
	ldoc --fatalwarnings .

# The redis-server's instructions per uncontended cycle, under callgrind:
# the textbook lock against the library with each option combination
# (bench/server_instructions.sh; about a minute; not in BENCH_EXTRA).
bench-instructions: build $(FLOOR)
	@LUA="$(LUA)" REDLOCK_BUILD="$(BUILD)" sh bench/server_instructions.sh

# The client's instructions per cycle, under callgrind: the library (each
# option combination, with_lock, try_acquire on a held key) against the
# textbook C loop (bench/client_instructions.sh; about a minute).
bench-client-instructions: build $(FLOOR)
	@LUA="$(LUA)" REDLOCK_BUILD="$(BUILD)" sh bench/client_instructions.sh

# The contended-lock benchmark (bench/contended.lua) against a C 1 ms-retry
# loop (bench/contended_floor.c); `make bench` calls it.
bench-contended: build $(BENCH_BIN)/contended_floor
	@tmp=$$(mktemp -d /tmp/redlock-bench.XXXXXX); \
	REDLOCK_TEST_TMP=$$tmp REDLOCK_BUILD=$(BUILD) BENCH_BIN=$(BENCH_BIN) \
	LUA_PATH='lua/?.lua;lua/?/init.lua;spec/?.lua;;' LUA_CPATH='$(BUILD)/?.so;;' \
	$(LUA) bench/contended.lua; rc=$$?; \
	for p in $$tmp/*/pid; do [ -f "$$p" ] && kill -KILL "$$(cat "$$p")" 2>/dev/null; done; \
	rm -rf "$$tmp"; exit $$rc

# What a held lock costs the server's memory against a plain SET PX
# (bench/server.lua); its CPU per cycle is in `make bench`'s second table.
bench-server: build
	@tmp=$$(mktemp -d /tmp/redlock-bench.XXXXXX); \
	REDLOCK_TEST_TMP=$$tmp LUA_PATH='lua/?.lua;spec/?.lua;;' LUA_CPATH='$(BUILD)/?.so;;' \
	$(LUA) bench/server.lua; rc=$$?; \
	for p in $$tmp/*/pid; do [ -f "$$p" ] && kill -KILL "$$(cat "$$p")" 2>/dev/null; done; \
	rm -rf "$$tmp"; exit $$rc

# Runs bench/$(1) with a redis-server and an nginx of its own
# (spec/openresty/nginx.lua), both stopped even when it fails; nginx's
# LuaJIT loads build/jit's core.
define nginx_bench
	@tmp=$$(mktemp -d /tmp/redlock-bench.XXXXXX); \
	REDLOCK_TEST_TMP=$$tmp LUA_PATH='lua/?.lua;spec/?.lua;;' LUA_CPATH='$(BUILD)/?.so;;' \
	$(LUA) bench/$(1); rc=$$?; \
	for s in $$tmp/*/stop; do [ -f "$$s" ] && sh "$$s"; done; \
	for p in $$tmp/*/pid; do [ -f "$$p" ] && kill -KILL "$$(cat "$$p")" 2>/dev/null; done; \
	rm -rf "$$tmp"; exit $$rc
endef

# Contention inside nginx: the default client against notify = false
# (bench/nginx.lua).
bench-nginx: build build-jit
	$(call nginx_bench,nginx.lua)

# The uncontended lock inside nginx against the same round trips sent by
# hand over cosockets, fenced and not (bench/nginx_uncontended.lua).
bench-nginx-uncontended: build build-jit
	$(call nginx_bench,nginx_uncontended.lua)

# Redlock over 5 servers vs 1, and the hiredis floor (bench/redlock.lua).
bench-redlock: build $(BENCH_BIN)/redlock_floor $(BENCH_BIN)/delay_proxy
	@tmp=$$(mktemp -d /tmp/redlock-bench.XXXXXX); \
	REDLOCK_TEST_TMP=$$tmp REDLOCK_BUILD=$(BUILD) BENCH_BIN=$(BENCH_BIN) \
	LUA_PATH='lua/?.lua;spec/?.lua;;' LUA_CPATH='$(BUILD)/?.so;;' $(LUA) bench/redlock.lua; rc=$$?; \
	for p in $$tmp/*/pid; do [ -f "$$p" ] && kill -KILL "$$(cat "$$p")" 2>/dev/null; done; \
	rm -rf "$$tmp"; exit $$rc

# The cycle over TLS against the same without TLS and against the C floor
# over TLS (bench/tls.lua, bench/tls_floor.c).
bench-tls: build $(BENCH_BIN)/tls_floor $(BENCH_BIN)/delay_proxy
	@tmp=$$(mktemp -d /tmp/redlock-bench.XXXXXX); \
	REDLOCK_TEST_TMP=$$tmp REDLOCK_BUILD=$(BUILD) \
	LUA_PATH='lua/?.lua;spec/?.lua;;' LUA_CPATH='$(BUILD)/?.so;;' $(LUA) bench/tls.lua; rc=$$?; \
	for p in $$tmp/*/pid; do [ -f "$$p" ] && kill -KILL "$$(cat "$$p")" 2>/dev/null; done; \
	rm -rf "$$tmp"; exit $$rc

# The cycle with replicas = 1 (WAIT with the script) against replicas = 0.
bench-replicas: build
	@tmp=$$(mktemp -d /tmp/redlock-bench.XXXXXX); \
	REDLOCK_TEST_TMP=$$tmp REDLOCK_BUILD=$(BUILD) \
	LUA_PATH='lua/?.lua;spec/?.lua;;' LUA_CPATH='$(BUILD)/?.so;;' $(LUA) bench/replicas.lua; rc=$$?; \
	for p in $$tmp/*/pid; do [ -f "$$p" ] && kill -KILL "$$(cat "$$p")" 2>/dev/null; done; \
	rm -rf "$$tmp"; exit $$rc

# How soon a client follows a Sentinel failover: +switch-master to its
# first lock on the new master (bench/sentinel.lua). Not in BENCH_EXTRA:
# its failovers take a minute.
bench-sentinel: build
	@tmp=$$(mktemp -d /tmp/redlock-bench.XXXXXX); \
	REDLOCK_TEST_TMP=$$tmp REDLOCK_BUILD=$(BUILD) \
	LUA_PATH='lua/?.lua;spec/?.lua;;' LUA_CPATH='$(BUILD)/?.so;;' $(LUA) bench/sentinel.lua; rc=$$?; \
	for p in $$tmp/*/pid; do [ -f "$$p" ] && kill -KILL "$$(cat "$$p")" 2>/dev/null; done; \
	rm -rf "$$tmp"; exit $$rc

# The cycle on a Redis Cluster against a plain server, and what a MOVED
# costs (bench/cluster.lua).
bench-cluster: build
	@tmp=$$(mktemp -d /tmp/redlock-bench.XXXXXX); \
	REDLOCK_TEST_TMP=$$tmp REDLOCK_BUILD=$(BUILD) \
	LUA_PATH='lua/?.lua;spec/?.lua;;' LUA_CPATH='$(BUILD)/?.so;;' $(LUA) bench/cluster.lua; rc=$$?; \
	for p in $$tmp/*/pid; do [ -f "$$p" ] && kill -KILL "$$(cat "$$p")" 2>/dev/null; done; \
	rm -rf "$$tmp"; exit $$rc

$(BENCH_BIN)/redlock_floor: bench/redlock_floor.c
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -o $@ $< $(HIREDIS_LIBS) $(LDFLAGS)

$(BENCH_BIN)/contended_floor: bench/contended_floor.c
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -o $@ $< $(HIREDIS_LIBS) $(LDFLAGS)

$(BENCH_BIN)/tls_floor: bench/tls_floor.c $(GEN_H) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -I$(GEN) -o $@ bench/tls_floor.c $(HIREDIS_LIBS) $(SSL_LIBS) $(LDFLAGS)

$(BENCH_BIN)/delay_proxy: bench/delay_proxy.c
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -o $@ $< $(LDFLAGS)

# Every benchmark program, built (make lint does, so a change in csrc/ that
# breaks a floor is found without running a benchmark).
bench-bins: $(FLOOR) $(BENCH_BIN)/redlock_floor $(BENCH_BIN)/contended_floor $(BENCH_BIN)/tls_floor \
	$(BENCH_BIN)/delay_proxy

clean:
	rm -rf $(BUILD) doc/html
