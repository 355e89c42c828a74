# Build, install and test the Rust replacements for libibverbs.so.1 and
# librdmacm.so.1 and the software provider rsw.
#
#   make              build the libraries and lay them out under build/
#   make demo         run ibv_rc_pingpong (server + client) over build/
#   make bench        perftest and qperf over build/ beside their baselines
#                     (docs/benchmarks.md; not part of test)
#   make soak         10^7 checksummed messages, thousands of QPs (not in test)
#   make test         build everything and run every test (ctests/harness.sh)
#   make man          the manual pages (man/*.scd, scdoc) into build/man/;
#                     part of `make` when scdoc is installed
#   make install      copy build/ to $(DESTDIR)$(PREFIX) and $(DESTDIR)$(SYSCONFDIR)
#                     (rsw-run, rsw-sysfs and rsw-stat to $(BINDIR), the
#                     manual pages to $(MANDIR))
#   make uninstall    remove what install copied
#   make deb          Debian packages replacing rdma-core's, into build/deb/
#   make lint         cargo fmt --check and cargo clippy (not part of `test`)
#   make clean        remove build/ and the cargo target directory's outputs

SHELL := /bin/bash
.DEFAULT_GOAL := all

PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR     ?= $(PREFIX)/share/man
SYSCONFDIR ?= /etc
DESTDIR    ?=

CARGO ?= cargo
CC    ?= cc
# Where the ABI facts live (symbol lists, imports of Debian's programs):
# in this repository (abi/README.md).
ABI_DIR ?= $(CURDIR)/abi/rdma-core-44

# The versions rdma-core 44 reports through pkg-config: we implement that ABI,
# so build systems that ask for a minimum version keep working.
IBVERBS_PC_VERSION := 1.14.44.0
RDMACM_PC_VERSION  := 1.3.44.0

BUILD            := $(CURDIR)/build
CARGO_TARGET_DIR ?= $(CURDIR)/target
CARGO_OUT        := $(CARGO_TARGET_DIR)/release

# One environment for every cargo invocation (build and test alike), so a
# crate's build script never sees a change and cargo never rebuilds for it.
# RSV_* are the install-time defaults libibverbs bakes in; IBVERBS_LIB_DIR
# tells librdmacm's build script where our libibverbs.so is.
CARGO_ENV := CARGO_TARGET_DIR='$(CARGO_TARGET_DIR)' \
	RSV_SYSCONFDIR='$(SYSCONFDIR)' \
	RSV_PROVIDER_DIR='$(LIBDIR)/libibverbs' \
	IBVERBS_LIB_DIR='$(CARGO_OUT)'

# Replace $2 by $1 only when the bytes differ, through a rename so programs
# that have the old copy mapped keep running and timestamps stay meaningful.
PUT = put() { mkdir -p "$$(dirname "$$2")"; \
	if ! cmp -s "$$1" "$$2"; then \
	  cp "$$1" "$$2.tmp.$$$$" || return 1; chmod "$$3" "$$2.tmp.$$$$" || return 1; \
	  mv -f "$$2.tmp.$$$$" "$$2" || return 1; echo "  PUT   $${2\#$(CURDIR)/}"; fi; }

# pkg-config files: $(call pcgen,TEMPLATE,PREFIX,LIBDIR,INCLUDEDIR,VERSION)
# (installed ones spell the directories under PREFIX as ${prefix}/...).
pcdir = $(patsubst $(PREFIX)/%,$${prefix}/%,$(1))
pcgen = sed -e 's|@PREFIX@|$(2)|g' -e 's|@LIBDIR@|$(3)|g' \
	-e 's|@INCLUDEDIR@|$(4)|g' -e 's|@VERSION@|$(5)|g' $(1)

.PHONY: all cargo-ibverbs cargo-rsw cargo-rdmacm cargo-rxe cargo-siw build-tree tools ctests ctests-bin \
	test check demo bench soak install uninstall deb lint clean man man-missing

# The manual pages are built by `make` when scdoc is there (README's
# apt-get line installs it); without it, `make` says so and goes on.
SCDOC := $(shell command -v scdoc 2>/dev/null)
all: build-tree tools $(if $(SCDOC),man,man-missing)

# Three separate invocations, in this order: librdmacm links against the
# libibverbs.so the first one produced.
cargo-ibverbs:
	$(CARGO_ENV) $(CARGO) build --release -p ibverbs
cargo-rsw: cargo-ibverbs
	$(CARGO_ENV) $(CARGO) build --release -p rsw
cargo-rdmacm: cargo-rsw
	$(CARGO_ENV) $(CARGO) build --release -p rdmacm
# The rxe provider links against that libibverbs.so too.
cargo-rxe: cargo-ibverbs
	$(CARGO_ENV) $(CARGO) build --release -p rxe-rs
# So does the siw provider.
cargo-siw: cargo-ibverbs
	$(CARGO_ENV) $(CARGO) build --release -p siw-rs

# build/ looks like an installed tree: a program run with
# LD_LIBRARY_PATH=build/lib and IBV_CONFIG_DIR=build/etc/libibverbs.d gets our
# libraries, and libibverbs finds the provider in lib/libibverbs/ beside itself.
build-tree: cargo-rdmacm cargo-rxe cargo-siw
	@$(PUT); set -e; \
	put '$(CARGO_OUT)/libibverbs.so' '$(BUILD)/lib/libibverbs.so.1' 0755; \
	put '$(CARGO_OUT)/librdmacm.so' '$(BUILD)/lib/librdmacm.so.1' 0755; \
	put '$(CARGO_OUT)/librsw.so' '$(BUILD)/lib/libibverbs/librsw-rdmav34.so' 0755; \
	put '$(CARGO_OUT)/librxe_rs.so' '$(BUILD)/lib/libibverbs/librxe-rs-rdmav34.so' 0755; \
	put '$(CARGO_OUT)/libsiw_rs.so' '$(BUILD)/lib/libibverbs/libsiw-rs-rdmav34.so' 0755; \
	ln -sfn libibverbs.so.1 '$(BUILD)/lib/libibverbs.so'; \
	ln -sfn librdmacm.so.1 '$(BUILD)/lib/librdmacm.so'; \
	mkdir -p '$(BUILD)/tmp'; \
	echo 'driver rsw' > '$(BUILD)/tmp/rsw.driver'; \
	put '$(BUILD)/tmp/rsw.driver' '$(BUILD)/etc/libibverbs.d/rsw.driver' 0644; \
	$(call pcgen,pkgconfig/libibverbs.pc.in,$(BUILD),$(BUILD)/lib,$(CURDIR)/include,$(IBVERBS_PC_VERSION)) > '$(BUILD)/tmp/libibverbs.pc'; \
	$(call pcgen,pkgconfig/librdmacm.pc.in,$(BUILD),$(BUILD)/lib,$(CURDIR)/include,$(RDMACM_PC_VERSION)) > '$(BUILD)/tmp/librdmacm.pc'; \
	put '$(BUILD)/tmp/libibverbs.pc' '$(BUILD)/lib/pkgconfig/libibverbs.pc' 0644; \
	put '$(BUILD)/tmp/librdmacm.pc' '$(BUILD)/lib/pkgconfig/librdmacm.pc' 0644; \
	{ echo "# Written by make: the configuration build/ was made with."; \
	  echo "PREFIX='$(PREFIX)'"; echo "BINDIR='$(BINDIR)'"; echo "LIBDIR='$(LIBDIR)'"; \
	  echo "INCLUDEDIR='$(INCLUDEDIR)'"; echo "SYSCONFDIR='$(SYSCONFDIR)'"; \
	  echo "CARGO_TARGET_DIR='$(CARGO_TARGET_DIR)'"; \
	  echo "RSV_SYSCONFDIR='$(SYSCONFDIR)'"; \
	  echo "RSV_PROVIDER_DIR='$(LIBDIR)/libibverbs'"; \
	  echo "IBVERBS_LIB_DIR='$(CARGO_OUT)'"; } > '$(BUILD)/tmp/config.env'; \
	put '$(BUILD)/tmp/config.env' '$(BUILD)/config.env' 0644

# ---------------------------------------------------------------------------
# C test programs: every ctests/src/*.c becomes build/ctests/<name>, compiled
# against include/ and linked against build/lib (librdmacm only for sources
# that include an <rdma/...> header).
CTEST_SRCS := $(wildcard ctests/src/*.c)
CTEST_BINS := $(patsubst ctests/src/%.c,$(BUILD)/ctests/%,$(CTEST_SRCS))
# Preload libraries the tests put under other programs: ctests/shim/*.c
# becomes build/ctests/<name>.so.
CTEST_SHIMS := $(patsubst ctests/shim/%.c,$(BUILD)/ctests/%.so,$(wildcard ctests/shim/*.c))
HEADERS    := $(shell find include -type f -name '*.h' 2>/dev/null)
CTEST_CFLAGS ?= -Wall -O2 -g

ctests: all
	@$(MAKE) --no-print-directory ctests-bin

# Used by the harness, which has already built the libraries.
ctests-bin: $(CTEST_BINS) $(CTEST_SHIMS)

# -MD records every header used; a header taken from /usr/include/infiniband
# or /usr/include/rdma means include/ lacks it, which must not pass unnoticed
# on machines that have rdma-core's -dev packages installed.
$(BUILD)/ctests/%: ctests/src/%.c $(HEADERS)
	@mkdir -p $(@D)
	$(CC) $(CTEST_CFLAGS) -I include -MD -MP -MF $@.d -o $@ $< -L $(BUILD)/lib \
	  $$(grep -q '^[[:space:]]*#[[:space:]]*include[[:space:]]*<rdma/' $< && echo -lrdmacm) \
	  -libverbs -lpthread
	@if grep -E '/usr/include/(infiniband|rdma)/' $@.d >&2; then \
	  echo "$<: the headers above come from the system, not from include/" >&2; \
	  rm -f $@; exit 1; fi

$(BUILD)/ctests/%.so: ctests/shim/%.c $(HEADERS)
	@mkdir -p $(@D)
	$(CC) $(CTEST_CFLAGS) -fPIC -shared -I include -o $@ $< -L $(BUILD)/lib -libverbs -ldl

# What each program included last time (ctests/src/common/*, headers), so
# changing any of it rebuilds the programs that use it.
-include $(CTEST_BINS:=.d)

# rsw-run (tools/rsw-run) and the program that writes the kernel's view of
# our devices for it (tools/rsw-sysfs.c), in build/bin beside each other.
# rsw-sysfs finds libibverbs.so.1 in ../lib when LD_LIBRARY_PATH does not say.
tools: $(BUILD)/bin/rsw-run $(BUILD)/bin/rsw-sysfs $(BUILD)/bin/rsw-stat

$(BUILD)/bin/rsw-run: tools/rsw-run
	@$(PUT); put '$<' '$@' 0755

TOOLS_CFLAGS ?= -Wall -O2 -g

$(BUILD)/bin/rsw-sysfs: tools/rsw-sysfs.c $(HEADERS) | build-tree
	@mkdir -p $(@D)
	$(CC) $(TOOLS_CFLAGS) -I include -MD -MF $@.d -o $@ $< -L $(BUILD)/lib -libverbs \
	  -Wl,-rpath,'$$ORIGIN/../lib'
	@if grep -E '/usr/include/(infiniband|rdma)/' $@.d >&2; then \
	  echo "$<: the headers above come from the system, not from include/" >&2; \
	  rm -f $@; exit 1; fi

# rsw-stat (tools/rsw-stat.c): prints a running process's rsw counters.
$(BUILD)/bin/rsw-stat: tools/rsw-stat.c | build-tree
	@mkdir -p $(@D)
	$(CC) $(TOOLS_CFLAGS) -o $@ $<

# Manual pages: man/NAME.S.scd -> build/man/manS/NAME.S, and a ".so" link
# page for every other name a page documents (man/build.sh; well under a
# second, so always run: it rewrites only pages that changed).
man:
	@man/build.sh '$(BUILD)/man'

man-missing:
	@echo "note: scdoc not found, manual pages not built (apt-get install scdoc)"

# ---------------------------------------------------------------------------
# (The harness gets make's path through SUBMAKE: a recipe naming $(MAKE)
# directly would run even under `make -n`.)
SUBMAKE = $(MAKE)
# Twice: the data-path tests run again with rsw's same-host path off
# (RSW_TRANSPORT=tcp), so both transports stay correct.
TCP_AGAIN = 'cargo/rsw' 'tests/ibv_*' 'tests/perftest' 'tests/qperf' 'tests/rc_*' \
	'tests/rdmacm_*' 'tests/verbs_conformance' 'tests/pyverbs_suite' \
	'tests/stale_objects' 'tests/ud_*' 'tests/verbs_check' 'tests/rsocket*'
HARNESS = BUILD='$(BUILD)' ABI_DIR='$(ABI_DIR)' MAKE='$(SUBMAKE)' CARGO='$(CARGO)' CC='$(CC)' \
	  ctests/harness.sh
test: all
	@rc=0; $(HARNESS) || rc=1; \
	echo "== the data-path tests again over TCP only (RSW_TRANSPORT=tcp)"; \
	RSW_TRANSPORT=tcp $(HARNESS) $(TCP_AGAIN) || rc=1; \
	exit $$rc

check: test

# A real RDMA program over our libraries: ibv_rc_pingpong on the loopback
# device, server and client in two processes.
demo: all
	BUILD='$(BUILD)' ctests/demo/rc_pingpong.sh

# Latency and bandwidth over our libraries (loopback and two namespaces)
# beside kernel TCP on the same path, memcpy, process_vm_writev and a
# shared-memory ping-pong; one table with ratios. See docs/benchmarks.md.
bench: all
	BUILD='$(BUILD)' bench/run.sh

# The long reliability run (10^7 checksummed messages, thousands of QPs),
# outside `make test`: bench/soak.sh.
soak: ctests
	bench/soak.sh

# ---------------------------------------------------------------------------
# install copies build/; it never changes how the libraries were built (the
# cargo step above is a no-op when PREFIX/LIBDIR/SYSCONFDIR are unchanged).
install: all
	install -d '$(DESTDIR)$(BINDIR)' '$(DESTDIR)$(LIBDIR)' '$(DESTDIR)$(LIBDIR)/libibverbs' \
	  '$(DESTDIR)$(LIBDIR)/pkgconfig' '$(DESTDIR)$(SYSCONFDIR)/libibverbs.d' \
	  '$(DESTDIR)$(INCLUDEDIR)'
	install -m 0755 '$(BUILD)/lib/libibverbs.so.1' '$(DESTDIR)$(LIBDIR)/libibverbs.so.1'
	ln -sfn libibverbs.so.1 '$(DESTDIR)$(LIBDIR)/libibverbs.so'
	install -m 0755 '$(BUILD)/lib/librdmacm.so.1' '$(DESTDIR)$(LIBDIR)/librdmacm.so.1'
	ln -sfn librdmacm.so.1 '$(DESTDIR)$(LIBDIR)/librdmacm.so'
	install -m 0755 '$(BUILD)/lib/libibverbs/librsw-rdmav34.so' \
	  '$(DESTDIR)$(LIBDIR)/libibverbs/librsw-rdmav34.so'
	for p in rxe siw; do install -m 0755 "$(BUILD)/lib/libibverbs/lib$$p-rs-rdmav34.so" \
	  "$(DESTDIR)$(LIBDIR)/libibverbs/lib$$p-rs-rdmav34.so" || exit 1; done
	install -m 0644 '$(BUILD)/etc/libibverbs.d/rsw.driver' \
	  '$(DESTDIR)$(SYSCONFDIR)/libibverbs.d/rsw.driver'
	install -m 0755 '$(BUILD)/bin/rsw-run' '$(DESTDIR)$(BINDIR)/rsw-run'
	install -m 0755 '$(BUILD)/bin/rsw-sysfs' '$(DESTDIR)$(BINDIR)/rsw-sysfs'
	install -m 0755 '$(BUILD)/bin/rsw-stat' '$(DESTDIR)$(BINDIR)/rsw-stat'
	cd include && find . -type f | sort | while read -r f; do \
	  install -D -m 0644 "$$f" '$(DESTDIR)$(INCLUDEDIR)'/"$${f#./}" || exit 1; done
	$(call pcgen,pkgconfig/libibverbs.pc.in,$(PREFIX),$(call pcdir,$(LIBDIR)),$(call pcdir,$(INCLUDEDIR)),$(IBVERBS_PC_VERSION)) \
	  > '$(DESTDIR)$(LIBDIR)/pkgconfig/libibverbs.pc'
	$(call pcgen,pkgconfig/librdmacm.pc.in,$(PREFIX),$(call pcdir,$(LIBDIR)),$(call pcdir,$(INCLUDEDIR)),$(RDMACM_PC_VERSION)) \
	  > '$(DESTDIR)$(LIBDIR)/pkgconfig/librdmacm.pc'
	chmod 0644 '$(DESTDIR)$(LIBDIR)/pkgconfig/libibverbs.pc' '$(DESTDIR)$(LIBDIR)/pkgconfig/librdmacm.pc'
	@if [ -n '$(SCDOC)' ]; then echo "install manual pages to $(DESTDIR)$(MANDIR)"; \
	  man/build.sh --list | while read -r f; do \
	    install -D -m 0644 '$(BUILD)/man'/"$$f" '$(DESTDIR)$(MANDIR)'/"$$f" || exit 1; done; \
	else echo "note: scdoc not found, manual pages not installed"; fi
	@if [ -z '$(DESTDIR)' ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then \
	  echo ldconfig; ldconfig; fi

uninstall:
	rm -f '$(DESTDIR)$(BINDIR)/rsw-run' '$(DESTDIR)$(BINDIR)/rsw-sysfs' '$(DESTDIR)$(BINDIR)/rsw-stat' \
	  '$(DESTDIR)$(LIBDIR)/libibverbs.so.1' '$(DESTDIR)$(LIBDIR)/libibverbs.so' \
	  '$(DESTDIR)$(LIBDIR)/librdmacm.so.1' '$(DESTDIR)$(LIBDIR)/librdmacm.so' \
	  '$(DESTDIR)$(LIBDIR)/libibverbs/librsw-rdmav34.so' \
	  '$(DESTDIR)$(LIBDIR)/libibverbs/librxe-rs-rdmav34.so' \
	  '$(DESTDIR)$(LIBDIR)/libibverbs/libsiw-rs-rdmav34.so' \
	  '$(DESTDIR)$(SYSCONFDIR)/libibverbs.d/rsw.driver' \
	  '$(DESTDIR)$(LIBDIR)/pkgconfig/libibverbs.pc' '$(DESTDIR)$(LIBDIR)/pkgconfig/librdmacm.pc'
	cd include && find . -type f | while read -r f; do \
	  rm -f '$(DESTDIR)$(INCLUDEDIR)'/"$${f#./}"; done
	man/build.sh --list | while read -r f; do rm -f '$(DESTDIR)$(MANDIR)'/"$$f"; done
	-rmdir '$(DESTDIR)$(LIBDIR)/libibverbs' 2>/dev/null
	@if [ -z '$(DESTDIR)' ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then \
	  echo ldconfig; ldconfig; fi

# ---------------------------------------------------------------------------
# Debian packages that replace rdma-core's (packaging/deb/build.sh; README.md,
# "Debian packages"). The libraries are built for PREFIX=/usr and the
# multiarch LIBDIR in a cargo target directory and build tree of their own,
# so build/ keeps the configuration it was made with; `make install` into a
# staging root, which build.sh splits into packages. The .debs go to build/deb/.
DEB_ARCH       ?= $(shell dpkg-architecture -qDEB_HOST_ARCH 2>/dev/null)
DEB_MULTIARCH  ?= $(shell dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null)
# The crate version, then the commit (count and hash) so every build of a
# newer commit upgrades the one before: 0.1.0+git103.9ff3ab2-1.
DEB_VERSION    ?= $(shell v=$$(sed -n 's/^version = "\(.*\)"$$/\1/p' Cargo.toml | head -n 1); \
	n=$$(git rev-list --count HEAD 2>/dev/null) && h=$$(git rev-parse --short=7 HEAD) && v=$$v+git$$n.$$h; \
	echo "$$v-1")
DEB_MAINTAINER ?=
DEB_OUT  := $(BUILD)/deb
DEB_WORK := $(BUILD)/deb-work
DEB_VARS := PREFIX=/usr LIBDIR=/usr/lib/$(DEB_MULTIARCH) INCLUDEDIR=/usr/include \
	SYSCONFDIR=/etc BUILD='$(DEB_WORK)/tree' CARGO_TARGET_DIR='$(CARGO_TARGET_DIR)/deb'

deb:
	@if [ -z '$(DEB_MULTIARCH)' ]; then \
	  echo "make deb: dpkg-architecture not found (apt-get install dpkg-dev)" >&2; exit 1; fi
	rm -rf '$(DEB_WORK)/root'
	$(MAKE) --no-print-directory install $(DEB_VARS) DESTDIR='$(DEB_WORK)/root'
	DEB_VERSION='$(DEB_VERSION)' DEB_ARCH='$(DEB_ARCH)' DEB_MULTIARCH='$(DEB_MULTIARCH)' \
	  DEB_MAINTAINER='$(DEB_MAINTAINER)' \
	  packaging/deb/build.sh '$(DEB_WORK)/root' '$(DEB_WORK)/pkgs' '$(DEB_OUT)'

# ---------------------------------------------------------------------------
lint:
	$(CARGO) fmt --all --check
	$(CARGO_ENV) $(CARGO) clippy --release -p verbs-abi -p verbs-rt -p ibverbs -p rsw --all-targets -- -D warnings
	$(CARGO_ENV) $(CARGO) clippy --release -p rdmacm --all-targets -- -D warnings
	$(CARGO_ENV) $(CARGO) clippy --release -p rxe-rs -p siw-rs --all-targets -- -D warnings

clean:
	rm -rf '$(BUILD)' '$(CARGO_TARGET_DIR)/deb'
	-$(CARGO) clean --release -p ibverbs -p rsw -p rdmacm -p rxe-rs -p siw-rs -p verbs-abi -p verbs-rt
