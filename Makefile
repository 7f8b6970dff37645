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

.PHONY: all deps build test demo bench bench-deps docs clean
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

# Benchmarks: never part of `make test`. Other benchmark targets join by
# adding themselves to BENCH_EXTRA; plain cases go in bench/cases/ instead.
FLOOR       := $(BUILD)/bench/floor
BENCH_EXTRA ?=

$(FLOOR): bench/floor.c csrc/scripts.h Makefile
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -Icsrc -o $@ bench/floor.c $(HIREDIS_LIBS) $(LDFLAGS)

bench-deps: deps
	@PACKAGES="gnuplot-nox" sh tools/deps.sh

bench: bench-deps build $(FLOOR)
	@sh bench/run.sh $(BENCH_ARGS)
	@for t in $(BENCH_EXTRA); do $(MAKE) --no-print-directory $$t || exit 1; done

# The HTML reference from the LDoc comments (config.ld), into doc/html
# (git-ignored). Debian's ldoc needs lua-discount for markdown.
docs:
	@PACKAGES="lua-ldoc lua-discount" sh tools/deps.sh
	ldoc --fatalwarnings .

clean:
	rm -rf $(BUILD) doc/html
