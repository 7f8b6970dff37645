# Thin wrapper: deps, build, test, demo, bench, lint. See README.md.
LUA_VERSION ?= 5.4
LUA         ?= lua$(LUA_VERSION)
LUA_CFLAGS  ?= $(shell pkg-config --cflags lua$(LUA_VERSION) 2>/dev/null || echo -I/usr/include/lua$(LUA_VERSION))
HIREDIS_LIBS ?= $(shell pkg-config --libs hiredis 2>/dev/null || echo -lhiredis)
BUILD       ?= build
CC          ?= cc
CFLAGS      ?= -O2 -g
WARN        := -std=c99 -Wall -Wextra -Werror -pedantic -Wno-overlength-strings
SRCS        := $(wildcard csrc/*.c)
HDRS        := $(wildcard csrc/*.h)
CORE        := $(BUILD)/redlock/core.so

.PHONY: all deps build test demo clean bench-redlock
all: build
build: $(CORE)

$(CORE): $(SRCS) $(HDRS) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -fPIC -fvisibility=hidden $(LUA_CFLAGS) -shared -o $@ $(SRCS) $(HIREDIS_LIBS) $(LDFLAGS)

deps:
	@sh tools/deps.sh

test: deps build
	@sh spec/run.sh

demo: deps build
	@sh examples/demo.sh

# Redlock over 5 servers vs 1, and the hiredis floor (bench/redlock.lua).
BENCH_BIN := $(BUILD)/bench
bench-redlock: build $(BENCH_BIN)/redlock_floor $(BENCH_BIN)/delay_proxy
	@tmp=$$(mktemp -d /tmp/redlock-bench.XXXXXX); \
	REDLOCK_TEST_TMP=$$tmp REDLOCK_BUILD=$(BUILD) BENCH_BIN=$(BENCH_BIN) \
	LUA_PATH='lua/?.lua;spec/?.lua;;' LUA_CPATH='$(BUILD)/?.so;;' $(LUA) bench/redlock.lua; rc=$$?; \
	for p in $$tmp/*/pid; do [ -f "$$p" ] && kill -KILL "$$(cat "$$p")" 2>/dev/null; done; \
	rm -rf "$$tmp"; exit $$rc

$(BENCH_BIN)/redlock_floor: bench/redlock_floor.c
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -o $@ $< $(HIREDIS_LIBS) $(LDFLAGS)

$(BENCH_BIN)/delay_proxy: bench/delay_proxy.c
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -o $@ $< $(LDFLAGS)

clean:
	rm -rf $(BUILD)
