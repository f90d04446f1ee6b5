# conncap -- one build: make, make test, make demo, make bench, make install.
# Sanitizer variants: make test SAN=asan | SAN=ubsan | SAN=tsan (build in build-$(SAN)/).

PREFIX   ?= /usr/local
LIBDIR   ?= $(PREFIX)/lib
BINDIR   ?= $(PREFIX)/bin
MANDIR   ?= $(PREFIX)/share/man
DOCDIR   ?= $(PREFIX)/share/doc/conncap
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
# The shim is a preload module, not a library to link with: a private directory.
PKGLIBDIR = $(LIBDIR)/conncap
PKGS     := hiredis libconfig
# OpenSSL's headers only: core/tls.c includes them, but OpenSSL 3 is dlopen'ed
# at the first TLS connect, never linked (so its cflags, not its libs).
CHECK_PKGS := $(PKGS) openssl
PKG_CONFIG ?= pkg-config
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

# Building needs the pkg-config packages only; `make` never installs anything
# (make test / demo / bench / deps do, through mk/deps.sh).
ifneq ($(filter-out clean uninstall deps test demo bench fuzz format format-check,$(or $(MAKECMDGOALS),all)),)
PKG_MISSING := $(shell for p in $(CHECK_PKGS); do $(PKG_CONFIG) --exists $$p 2>/dev/null || printf '%s ' $$p; done)
ifneq ($(PKG_MISSING),)
$(error missing build dependencies: $(PKG_CONFIG) finds no $(PKG_MISSING)(on Debian: apt-get install pkg-config libhiredis-dev libconfig-dev libssl-dev, or run make deps as root))
endif
endif
PKG_CFLAGS := $(shell $(PKG_CONFIG) --cflags $(CHECK_PKGS) 2>/dev/null)
PKG_LIBS   := $(shell $(PKG_CONFIG) --libs $(PKGS) 2>/dev/null)
# CPPFLAGS, CFLAGS and LDFLAGS are the packager's (dpkg-buildflags: FORTIFY,
# stack protector, relro/now); ours are appended, also to a command-line CFLAGS.
CFLAGS   ?= -O2 -g
override CFLAGS += -std=gnu11 -Wall -Wextra -Wno-missing-field-initializers -fPIC -pthread \
            -fvisibility=hidden -D_GNU_SOURCE -Icore -I$(BUILD) $(PKG_CFLAGS) $(SANFLAGS)
LDLIBS   := $(PKG_LIBS) -ldl -pthread

LUA      := $(sort $(wildcard lua/*.lua))
CORE_SRC := $(sort $(wildcard core/*.c))
RT_SRC   := $(sort $(wildcard runtime/*.c))
SHIM_SRC := $(sort $(wildcard shim/*.c))
CLI_SRC  := $(sort $(wildcard cli/*.c))
UNIT_SRC := $(sort $(wildcard tests/unit/test_*.c))
PROG_SRC := $(sort $(wildcard tests/progs/*.c))

# Three layers, linked one way: the CLI links core only; the shim links
# runtime and core (doc/ARCHITECTURE.md).
CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/%.o) $(BUILD)/scripts.o
RT_OBJ   := $(RT_SRC:%.c=$(BUILD)/%.o)
SHIM_OBJ := $(SHIM_SRC:%.c=$(BUILD)/%.o)
# Only the shim, the runtime and their tests see the runtime's headers: core
# and the CLI cannot include them.
$(RT_OBJ) $(SHIM_OBJ): override CFLAGS += -Iruntime
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
UNITS    := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
PROGS    := $(PROG_SRC:tests/progs/%.c=$(BUILD)/progs/%)

.PHONY: all deps test test-build unit integration demo bench bench-build install uninstall clean FORCE
all: $(BUILD)/libconncap.so $(BUILD)/conncap

$(BUILD)/scripts.c: $(LUA) lua mk/embed-lua.sh
	@mkdir -p $(@D)
	sh mk/embed-lua.sh $@ $(LUA)

$(BUILD)/%.o: %.c $(wildcard core/*.h runtime/*.h shim/*.h cli/*.h)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

# The install paths the CLI finds the shim by, rewritten only when they change:
# `make install` with other paths than `make` rebuilds the CLI with them.
$(BUILD)/paths.h: FORCE
	@mkdir -p $(@D)
	@printf '#define CCAP_VERSION "%s"\n#define CCAP_BINDIR "%s"\n#define CCAP_PKGLIBDIR "%s"\n' \
	    '$(VERSION)' '$(BINDIR)' '$(PKGLIBDIR)' > $@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv -f $@.tmp $@; fi
$(BUILD)/cli/conncap.o $(BUILD)/cli/metrics.o: $(BUILD)/paths.h

$(BUILD)/scripts.o: $(BUILD)/scripts.c
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

# The shim exports only the libc symbols it interposes (shim/exports.map).
# It carries its own hiredis and libconfig, linked from their static archives
# with every symbol hidden: the shim never binds to a program's own copy of
# either (another version under the same names), nor the program to the
# shim's, and needs neither at run time. The CLI and the tests link them as
# shared libraries. pkg-config's libdir first, then the compiler's path.
static_lib = $(firstword $(wildcard $(addsuffix /lib$(1).a,$(shell $(PKG_CONFIG) --variable=libdir $(2) 2>/dev/null))) \
                         $(shell $(CC) -print-file-name=lib$(1).a))
HIREDIS_A   := $(call static_lib,hiredis,hiredis)
LIBCONFIG_A := $(call static_lib,config,libconfig)
SHIM_LIBS   := -Wl,--exclude-libs,ALL $(HIREDIS_A) $(BUILD)/libconfig-shim.a -ldl -pthread

# libconfig.a (PIE code in Debian) reaches stdin/stdout/stderr directly; those
# references are renamed to the shim's hidden ones (shim/lcstdio.c). Its
# allocations, locale calls and exit go through core/lcalloc.c: libconfig
# does not check its mallocs, and a parse that runs out of memory must fail,
# not crash the host (core/lcalloc.h).
LC_RENAMED := malloc calloc realloc free newlocale uselocale freelocale exit
$(BUILD)/libconfig-shim.a: $(LIBCONFIG_A) Makefile
	@mkdir -p $(@D)
	objcopy --redefine-sym stdin=ccap_lc_stdin --redefine-sym stdout=ccap_lc_stdout \
	    --redefine-sym stderr=ccap_lc_stderr --redefine-sym __strdup=ccap_lc_strdup \
	    $(foreach f,$(LC_RENAMED),--redefine-sym $(f)=ccap_lc_$(f)) $< $@

$(BUILD)/libconncap.so: $(CORE_OBJ) $(RT_OBJ) $(SHIM_OBJ) shim/exports.map $(BUILD)/libconfig-shim.a
	$(CC) $(CFLAGS) $(LDFLAGS) -shared -Wl,--version-script=shim/exports.map -Wl,-z,relro,-z,now -o $@ \
	    $(CORE_OBJ) $(RT_OBJ) $(SHIM_OBJ) $(SHIM_LIBS)

# The CLI links core only, from an archive: it takes in only the core
# objects it uses (tests/integration/layers_link.sh checks what it carries).
$(BUILD)/libccap-core.a: $(CORE_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/conncap: $(CLI_OBJ) $(BUILD)/libccap-core.a
	$(CC) $(CFLAGS) $(LDFLAGS) -Wl,-z,relro,-z,now -o $@ $(CLI_OBJ) $(BUILD)/libccap-core.a $(LDLIBS) -lm

# A unit test links core and runtime (the runtime's tests drive it without the shim).
$(BUILD)/tests/%: tests/unit/%.c $(CORE_OBJ) $(RT_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -Iruntime -Itests/lib -o $@ $< $(CORE_OBJ) $(RT_OBJ) $(LDLIBS) -lcmocka -lm

$(BUILD)/progs/%: tests/progs/%.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -fvisibility=default -o $@ $< -pthread

# Linked against the shim rather than preloaded: a setgid copy keeps it
# (the loader ignores LD_PRELOAD paths in secure-execution mode).
$(BUILD)/progs/secureprobe: tests/progs/secureprobe.c $(BUILD)/libconncap.so
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fvisibility=default -o $@ $< -L$(BUILD) -lconncap -Wl,-rpath,$(abspath $(BUILD)) -pthread

# A preloaded allocator that fails on purpose (tests/integration/lifecycle_nomem.sh).
$(BUILD)/lib/libfailalloc.so: tests/lib/failalloc.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(filter-out $(SANFLAGS),$(CFLAGS)) $(LDFLAGS) -shared -fvisibility=hidden -o $@ $< -ldl

# What the tests run; one goal, so an up-to-date build prints nothing.
test-build: all $(UNITS) $(PROGS) $(BUILD)/lib/libfailalloc.so

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

deps:
	@sh mk/deps.sh build

# One set, for make install and the Debian package: the CLI, the shim in a
# private directory, the manual pages, bash completion, and in DOCDIR what the
# README and the manual pages point to, laid out as in the tree (so the
# README's relative paths hold there too): the README, doc/*.md, the
# deployment and monitoring examples, and the reference configuration as
# examples/conncap.conf (never a live /etc/conncap.conf that would cap traffic
# nobody chose). tests/integration/install_named_paths.sh checks that every
# path they name is here.
DOCS     := README.md $(sort $(wildcard doc/*.md))
EXAMPLES := examples/redis-acl.conf examples/docker/Dockerfile examples/docker/compose.yaml \
            examples/docker/conncap.conf examples/kubernetes/conncap.yaml examples/systemd/legacy-client.service \
            examples/systemd/nginx.service.d/conncap.conf examples/monitoring/conncap-alerts.yml \
            examples/monitoring/conncap-dashboard.json
INSTALLED = $(BINDIR)/conncap $(PKGLIBDIR)/libconncap.so $(MANDIR)/man1/conncap.1 $(MANDIR)/man5/conncap.conf.5 \
            $(DOCDIR)/examples/conncap.conf $(BASHCOMPDIR)/conncap $(addprefix $(DOCDIR)/,$(DOCS) $(EXAMPLES))
# the directories of DOCDIR, deepest first (uninstall removes them when empty)
DOC_DIRS  = $(addprefix $(DOCDIR)/,examples/systemd/nginx.service.d examples/systemd examples/docker \
            examples/kubernetes examples/monitoring examples doc) $(DOCDIR)
install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(PKGLIBDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 \
	    $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(BASHCOMPDIR)
	install -m 0755 $(BUILD)/conncap $(DESTDIR)$(BINDIR)/conncap
	install -m 0644 $(BUILD)/libconncap.so $(DESTDIR)$(PKGLIBDIR)/libconncap.so
	install -m 0644 doc/conncap.1 $(DESTDIR)$(MANDIR)/man1/conncap.1
	install -m 0644 doc/conncap.conf.5 $(DESTDIR)$(MANDIR)/man5/conncap.conf.5
	install -m 0644 conf/conncap.conf $(DESTDIR)$(DOCDIR)/examples/conncap.conf
	install -m 0644 completions/conncap $(DESTDIR)$(BASHCOMPDIR)/conncap
	for f in $(DOCS) $(EXAMPLES); do install -D -m 0644 "$$f" "$(DESTDIR)$(DOCDIR)/$$f" || exit 1; done

uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALLED))
	rmdir $(DESTDIR)$(PKGLIBDIR) $(addprefix $(DESTDIR),$(DOC_DIRS)) 2>/dev/null || true

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

# The core, runtime and CLI objects but main, as an archive: a fuzz target, or a
# unit test of CLI code (tests/unit/test_cli_*.c), links only what it uses.
$(BUILD)/libccap-test.a: $(CORE_OBJ) $(RT_OBJ) $(filter-out $(BUILD)/cli/conncap.o,$(CLI_OBJ))
	rm -f $@ && ar rcs $@ $^

$(BUILD)/fuzz/%: tests/fuzz/%.c $(BUILD)/libccap-test.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fsanitize=fuzzer -Iruntime -Itests/lib -Icli -o $@ $< $(BUILD)/libccap-test.a $(LDLIBS) -lm

$(BUILD)/tests/test_cli_%: tests/unit/test_cli_%.c $(BUILD)/libccap-test.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itests/lib -Icli -o $@ $< $(BUILD)/libccap-test.a $(LDLIBS) -lcmocka -lm

fuzz:
	@sh mk/deps.sh fuzz
	@$(MAKE) --no-print-directory fuzz-build
	@FUZZ_SECONDS=$(FUZZ_SECONDS) bash tests/fuzz/run.sh long $(T)

fuzz-if-available:
	@$(if $(FUZZ_RT),$(MAKE) --no-print-directory fuzz-build,echo "fuzz: no libFuzzer runtime for $(FUZZ_CC) (libclang-rt-14-dev)")

# The C style is .clang-format's: make format rewrites every C file of the
# tree in place; make format-check lists what it would change and fails
# (not part of make test). CLANG_FORMAT: the Debian package clang-format-14.
CLANG_FORMAT ?= clang-format-14
FORMAT_SRC = $(sort $(wildcard $(addsuffix /*.[ch],core runtime shim cli bench examples tests/*)))
.PHONY: format format-check
format:
	$(CLANG_FORMAT) -i $(FORMAT_SRC)
format-check:
	$(CLANG_FORMAT) --dry-run --Werror $(FORMAT_SRC)
