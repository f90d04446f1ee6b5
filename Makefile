# conncap -- one build: make, make test, make demo, make bench, make install.
# Sanitizer variants: make test SAN=asan | SAN=ubsan | SAN=tsan (build in build-$(SAN)/).

PREFIX   ?= /usr/local
LIBDIR   ?= $(PREFIX)/lib
BINDIR   ?= $(PREFIX)/bin
SYSCONF  ?= /etc
PKGS     := hiredis libconfig
VERSION  := 0.2.0
CC       ?= cc

ifeq ($(SAN),)
BUILD    ?= build
SANFLAGS :=
else ifeq ($(SAN),asan)
BUILD    ?= build-asan
SANFLAGS := -fsanitize=address -fno-omit-frame-pointer
else ifeq ($(SAN),ubsan)
BUILD    ?= build-ubsan
SANFLAGS := -fsanitize=undefined -fno-sanitize-recover=undefined
else ifeq ($(SAN),tsan)
BUILD    ?= build-tsan
SANFLAGS := -fsanitize=thread
else
$(error SAN must be asan, ubsan or tsan)
endif

PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CFLAGS   ?= -O2 -g
CFLAGS   += -std=gnu11 -Wall -Wextra -Wno-missing-field-initializers -fPIC -pthread \
            -fvisibility=hidden -D_GNU_SOURCE -Icore -I$(BUILD) $(PKG_CFLAGS) $(SANFLAGS)
LDLIBS   := $(PKG_LIBS) -ldl -pthread

LUA      := $(sort $(wildcard lua/*.lua))
CORE_SRC := $(sort $(wildcard core/*.c))
SHIM_SRC := $(sort $(wildcard shim/*.c))
CLI_SRC  := $(sort $(wildcard cli/*.c))
UNIT_SRC := $(sort $(wildcard tests/unit/test_*.c))
PROG_SRC := $(sort $(wildcard tests/progs/*.c))

CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/%.o) $(BUILD)/scripts.o
SHIM_OBJ := $(SHIM_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
UNITS    := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
PROGS    := $(PROG_SRC:tests/progs/%.c=$(BUILD)/progs/%)

.PHONY: all deps test test-build unit integration demo bench bench-build install uninstall clean
all: deps $(BUILD)/libconncap.so $(BUILD)/conncap

deps:
	@sh mk/deps.sh build

$(BUILD)/scripts.c: $(LUA) mk/embed-lua.sh
	@mkdir -p $(@D)
	sh mk/embed-lua.sh $@ $(LUA)

$(BUILD)/%.o: %.c $(wildcard core/*.h shim/*.h cli/*.h)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/cli/conncap.o: CFLAGS += -DCCAP_VERSION='"$(VERSION)"' -DCCAP_LIBDIR='"$(LIBDIR)"'

$(BUILD)/scripts.o: $(BUILD)/scripts.c
	$(CC) $(CFLAGS) -c -o $@ $<

# The shim exports only the libc symbols it interposes (shim/exports.map).
$(BUILD)/libconncap.so: $(CORE_OBJ) $(SHIM_OBJ) shim/exports.map
	$(CC) $(CFLAGS) -shared -Wl,--version-script=shim/exports.map -Wl,-z,now -o $@ \
	    $(CORE_OBJ) $(SHIM_OBJ) $(LDLIBS)

$(BUILD)/conncap: $(CORE_OBJ) $(CLI_OBJ)
	$(CC) $(CFLAGS) -o $@ $(CLI_OBJ) $(CORE_OBJ) $(LDLIBS) -lm

$(BUILD)/tests/%: tests/unit/%.c $(CORE_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itests/lib -o $@ $< $(CORE_OBJ) $(LDLIBS) -lcmocka -lm

$(BUILD)/progs/%: tests/progs/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fvisibility=default -o $@ $< -pthread

# Linked against the shim rather than preloaded: a setgid copy keeps it
# (the loader ignores LD_PRELOAD paths in secure-execution mode).
$(BUILD)/progs/secureprobe: tests/progs/secureprobe.c $(BUILD)/libconncap.so
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fvisibility=default -o $@ $< -L$(BUILD) -lconncap -Wl,-rpath,$(abspath $(BUILD)) -pthread

# What the tests run; one goal, so an up-to-date build prints nothing.
test-build: all $(UNITS) $(PROGS)

test:
	@sh mk/deps.sh test
	@$(MAKE) --no-print-directory test-build
	@BUILD=$(BUILD) SAN=$(SAN) bash tests/run.sh $(T)

unit: all $(UNITS)
	@BUILD=$(BUILD) SAN=$(SAN) bash tests/run.sh unit

demo:
	@sh mk/deps.sh demo
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) bash examples/demo.sh

bench-build: all $(PROGS)

bench:
	@sh mk/deps.sh bench
	@$(MAKE) --no-print-directory bench-build
	@BUILD=$(BUILD) bash bench/run.sh

install: all
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(BINDIR)
	install -m 0755 $(BUILD)/libconncap.so $(DESTDIR)$(LIBDIR)/libconncap.so
	install -m 0755 $(BUILD)/conncap $(DESTDIR)$(BINDIR)/conncap
	# The reference config carries example rules: it is installed as an example,
	# never as a live /etc/conncap.conf that would cap traffic nobody chose.
	install -D -m 0644 conf/conncap.conf $(DESTDIR)$(SYSCONF)/conncap.conf.example

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/libconncap.so $(DESTDIR)$(BINDIR)/conncap

clean:
	rm -rf build build-asan build-ubsan build-tsan
