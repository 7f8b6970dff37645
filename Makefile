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

.PHONY: all deps build test demo clean bench-contended
all: build
build: $(CORE)

$(CORE): $(SRCS) $(HDRS) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -pthread -fPIC -fvisibility=hidden $(LUA_CFLAGS) -shared -o $@ $(SRCS) $(HIREDIS_LIBS) -pthread $(LDFLAGS)

deps:
	@sh tools/deps.sh

test: deps build
	@sh spec/run.sh

demo: deps build
	@sh examples/demo.sh

# The contended-lock benchmark (bench/contended.lua); `make bench` calls it.
bench-contended: build
	LUA_PATH="lua/?.lua;lua/?/init.lua;;" LUA_CPATH="$(BUILD)/?.so;;" $(LUA) bench/contended.lua

clean:
	rm -rf $(BUILD)
