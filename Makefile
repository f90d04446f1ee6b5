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
else ifeq ($(SAN),fuzz)
# the libFuzzer targets' build (make fuzz; see the fuzz block below)
BUILD    ?= build-fuzz
CC       := $(or $(FUZZ_CC),clang-14)
SANFLAGS := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
else
$(error SAN must be asan, ubsan or tsan (or fuzz, for the fuzz targets))
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
# It carries its own hiredis and libconfig, linked from their static archives
# with every symbol hidden: the shim never binds to a program's own copy of
# either (another version under the same names), nor the program to the
# shim's, and needs neither at run time. The CLI and the tests link them as
# shared libraries. pkg-config's libdir first, then the compiler's path.
static_lib = $(firstword $(wildcard $(addsuffix /lib$(1).a,$(shell pkg-config --variable=libdir $(2) 2>/dev/null))) \
                         $(shell $(CC) -print-file-name=lib$(1).a))
HIREDIS_A   := $(call static_lib,hiredis,hiredis)
LIBCONFIG_A := $(call static_lib,config,libconfig)
SHIM_LIBS   := -Wl,--exclude-libs,ALL $(HIREDIS_A) $(BUILD)/libconfig-shim.a -ldl -pthread

# libconfig.a (PIE code in Debian) reaches stdin/stdout/stderr directly; those
# references are renamed to the shim's hidden ones (shim/lcstdio.c).
$(BUILD)/libconfig-shim.a: $(LIBCONFIG_A)
	@mkdir -p $(@D)
	objcopy --redefine-sym stdin=ccap_lc_stdin --redefine-sym stdout=ccap_lc_stdout \
	    --redefine-sym stderr=ccap_lc_stderr $< $@

$(BUILD)/libconncap.so: $(CORE_OBJ) $(SHIM_OBJ) shim/exports.map $(BUILD)/libconfig-shim.a
	$(CC) $(CFLAGS) -shared -Wl,--version-script=shim/exports.map -Wl,-z,now -o $@ \
	    $(CORE_OBJ) $(SHIM_OBJ) $(SHIM_LIBS)

$(BUILD)/conncap: $(CORE_OBJ) $(CLI_OBJ)
	$(CC) $(CFLAGS) -o $@ $(CLI_OBJ) $(CORE_OBJ) $(LDLIBS) -lm

$(BUILD)/tests/%: tests/unit/%.c $(CORE_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itests/lib -o $@ $< $(CORE_OBJ) $(LDLIBS) -lcmocka -lm

$(BUILD)/progs/%: tests/progs/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fvisibility=default -o $@ $< -pthread

# What the tests run; one goal, so an up-to-date build prints nothing.
test-build: all $(UNITS) $(PROGS)

test:
	@sh mk/deps.sh test
	@$(MAKE) --no-print-directory test-build
	@$(if $(FUZZ_IN_TEST),$(MAKE) --no-print-directory fuzz-if-available)
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
	rm -rf build build-asan build-ubsan build-tsan build-fuzz

# ---- libFuzzer targets: tests/fuzz/fuzz_NAME.c, seed corpus tests/fuzz/corpus/NAME/ ----
# Each defines LLVMFuzzerTestOneInput and links against the core and CLI objects,
# built with clang, libFuzzer, ASan and UBSan in build-fuzz/ (SAN=fuzz). `make fuzz`
# runs each for FUZZ_SECONDS over a working copy of its corpus (build-fuzz/corpus/);
# `make test` (without SAN) runs each briefly over its committed corpus when clang's
# libFuzzer runtime is installed (libclang-rt-14-dev), and reports them skipped if not.
FUZZ_CC      ?= clang-14
FUZZ_SECONDS ?= 180
FUZZ_SRC     := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_RT       = $(wildcard $(shell $(FUZZ_CC) --print-runtime-dir 2>/dev/null)/libclang_rt.fuzzer-*.a)
FUZZ_IN_TEST := $(if $(SAN),,$(if $(T),$(filter fuzz fuzz_%,$(T)),all))
.PHONY: fuzz fuzz-build fuzz-if-available

ifeq ($(SAN),fuzz)
fuzz-build: $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz/%)
	@:
else
fuzz-build:
	@$(MAKE) --no-print-directory SAN=fuzz fuzz-build
endif

# The core and CLI objects but main, as an archive: a fuzz target, or a unit test
# of CLI code (tests/unit/test_cli_*.c), links only what it uses.
$(BUILD)/libccap-test.a: $(CORE_OBJ) $(filter-out $(BUILD)/cli/conncap.o,$(CLI_OBJ))
	rm -f $@ && ar rcs $@ $^

$(BUILD)/fuzz/%: tests/fuzz/%.c $(BUILD)/libccap-test.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fsanitize=fuzzer -Itests/lib -Icli -o $@ $< $(BUILD)/libccap-test.a $(LDLIBS) -lm

$(BUILD)/tests/test_cli_%: tests/unit/test_cli_%.c $(BUILD)/libccap-test.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itests/lib -Icli -o $@ $< $(BUILD)/libccap-test.a $(LDLIBS) -lcmocka -lm

fuzz:
	@sh mk/deps.sh fuzz
	@$(MAKE) --no-print-directory fuzz-build
	@FUZZ_SECONDS=$(FUZZ_SECONDS) bash tests/fuzz/run.sh long $(T)

fuzz-if-available:
	@$(if $(FUZZ_RT),$(MAKE) --no-print-directory fuzz-build,echo "fuzz: no libFuzzer runtime for $(FUZZ_CC) (libclang-rt-14-dev)")
