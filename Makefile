# The two commands of the README:
#   make run    installs missing system packages, builds, starts the agent on the XDG defaults
#   make test   installs what the tests need, then runs the whole suite
# and make install [PREFIX=~/.local] [DESTDIR=…] / make uninstall (below).
SHELL := /bin/bash

# libnotify-dev brings libnotify4, which the agent dlopens at its first notification;
# libcurl4-openssl-dev brings libcurl4, which it dlopens as it starts (see docs/install.md).
BUILD_PACKAGES := pkg-config libcurl4-openssl-dev libsqlite3-dev libnotify-dev
# e2fsprogs and mount: the full- and failing-disk tests (tmpfs, loop-mounted ext4);
# ffmpeg (and ffprobe) make and check real HLS; openssl encrypts its AES-128 copy.
# InstallTests reads what make install put in place as its readers do: man-db and
# groff-base (man -l), systemd (systemd-analyze verify), bash-completion, zsh, fish.
# iproute2 (ip netns, veth) takes a test agent offline; libsystemd0 is the sd-bus
# the agent dlopens to follow NetworkManager (mocked by python3-dbusmock).
# fuse3 and libfuse3-dev, built with gcc: forgetfs, the test file system that
# forgets at a power cut what was never made durable (Tests/TestSupport/forgetfs);
# bindfs (FUSE) shows an inbox whose files appear as a network mount's do, unseen by inotify.
# aria2: aria2c itself, the oracle the RPC's answers are compared with (and a bench peer).
# dante-server: danted, the real SOCKS5 server the proxy tests send transfers through.
TEST_PACKAGES  := nginx-light dbus python3-dbusmock e2fsprogs mount ffmpeg openssl \
                  man-db groff-base systemd bash-completion zsh fish iproute2 libsystemd0 \
                  python3-venv fuse3 libfuse3-dev gcc bindfs aria2 dante-server
BENCH_PACKAGES := curl time streamlink
# From PyPI into a virtualenv of our own, made by Debian's python3 (python3-venv),
# whatever python3 comes first on PATH: aiohttp-tus, the real tus server of the
# tests (Tests/TestSupport/tus_server.py), aria2p, the aria2 RPC client (library
# and CLI) the RPC tests drive the agent with, and for make bench yt-dlp, its HLS
# peer, and tuspy, the reference tus client. venv_install,PACKAGES,MODULES runs
# pip only when one of the MODULES does not import; a venv whose python no
# longer runs is made anew.
VENV := .venv
VENV_PYTHON := $(VENV)/bin/python
define venv_install
	@$(VENV_PYTHON) -c '' 2>/dev/null || /usr/bin/python3 -m venv --clear $(VENV)
	@$(VENV_PYTHON) -c '$(foreach module,$(2),import $(module);)' 2>/dev/null || \
	  $(VENV_PYTHON) -m pip install -q --disable-pip-version-check $(1)
endef
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run test torture bench bench-ab fuzz build release install uninstall deps test-deps bench-deps clean check-syscalls

# Installs, with apt, only the packages that are missing.
define apt_install
	@missing=$$(for p in $(1); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
endef

deps:
	$(call apt_install,$(BUILD_PACKAGES))

test-deps: deps
	$(call apt_install,$(TEST_PACKAGES))
	$(call venv_install,aiohttp-tus aria2p,aiohttp_tus aria2p)

bench-deps: test-deps
	$(call apt_install,$(BENCH_PACKAGES))
	$(call venv_install,tuspy yt-dlp,tusclient yt_dlp)

build: deps
	swift build

# The Swift runtime and Foundation linked in: a resident agent maps only the
# pages it uses (about 6 MiB less RSS, measured) and needs no Swift install.
RELEASE_FLAGS := -c release --static-swift-stdlib
# InstallTests builds in a tree of its own, INSTALL_TEST_BUILD: swift test holds
# the lock of .build while tests run, so a build there would wait forever.
RELEASE_BUILD := .build
INSTALL_TEST_BUILD := .build-install-test
RELEASE := swift build --scratch-path $(RELEASE_BUILD) $(RELEASE_FLAGS)
RELEASE_BINARY = "$$($(RELEASE) --show-bin-path)/syncagent"

# SwiftPM (6.3) keeps a tree's build plan when only --static-swift-stdlib
# changes: after a plain `swift build -c release` there, it would keep linking
# the Swift runtime dynamically. Its plan file
# removed, it plans again; a binary that needs a Swift install is never shipped.
release: deps
	$(RELEASE) --product syncagent
	@if ldd $(RELEASE_BINARY) | grep -q libswiftCore; then \
	  echo "$(RELEASE_BUILD)/release.yaml links the Swift runtime dynamically: planning again" >&2; \
	  rm -f $(RELEASE_BUILD)/release.yaml && $(RELEASE) --product syncagent; fi
	@! ldd $(RELEASE_BINARY) | grep -q libswiftCore || { echo "syncagent still links libswiftCore.so" >&2; exit 1; }

run: release
	$(RELEASE_BINARY) run

# The release tree InstallTests installs from is built here, before the suite
# runs beside it, so the test only finds it up to date. The suites run in
# TEST_PROCESSES test processes at once (Tests/scripts/run-suites says why).
TEST_PROCESSES ?= 2
test: test-deps
	$(MAKE) --no-print-directory release RELEASE_BUILD=$(INSTALL_TEST_BUILD)
	swift build --build-tests
	/usr/bin/python3 Tests/scripts/run-suites --processes $(TEST_PROCESSES)

# The power-cut torture (PowerCutTests) at length: POWER_CUTS cuts of the
# power under the agent on forgetfs, where `make test` makes 12.
POWER_CUTS ?= 100
torture: test-deps
	swift build --build-tests
	SYNCAGENT_POWER_CUTS=$(POWER_CUTS) swift test --skip-build --filter PowerCutTests

# make install [PREFIX=~/.local] [DESTDIR=/tmp/stage]: each file where its reader
# looks: man (from PATH's ../share/man), bash-completion, fish and the systemd user
# manager (XDG_DATA_HOME for ~/.local, XDG_DATA_DIRS for /usr/local and /usr),
# zsh (/usr/local/share/zsh/site-functions is on fpath; ~/.local's must be added).
PREFIX ?= $(HOME)/.local
bindir      := $(PREFIX)/bin
datadir     := $(PREFIX)/share
man1dir     := $(datadir)/man/man1
man5dir     := $(datadir)/man/man5
bashcompdir := $(datadir)/bash-completion/completions
zshcompdir  := $(datadir)/zsh/site-functions
fishcompdir := $(datadir)/fish/vendor_completions.d
# Not PREFIX/lib/systemd/user: `systemctl --user` never looks in ~/.local/lib.
userunitdir := $(datadir)/systemd/user
exampledir  := $(datadir)/syncagent
docdir      := $(datadir)/doc/syncagent
ifneq ($(filter install uninstall,$(MAKECMDGOALS)),)
  ifneq ($(words $(PREFIX)),1)
    $(error PREFIX must be one path, without spaces: "$(PREFIX)")
  endif
endif
# The README's reference pages, beside it so its links resolve.
REFERENCE := $(sort $(wildcard docs/*.md))
INSTALLED := $(bindir)/syncagent $(man1dir)/syncagent.1 $(man5dir)/syncagent.job.5 $(man5dir)/syncagent.toml.5 \
             $(bashcompdir)/syncagent $(zshcompdir)/_syncagent \
             $(fishcompdir)/syncagent.fish $(userunitdir)/syncagent.service $(exampledir)/config.toml.example \
             $(docdir)/README.md $(addprefix $(docdir)/,$(REFERENCE))

# The man pages are written by hand in docs/man (ManPageTests holds them to
# the binary's commands, options and exit statuses, and to every job and
# config key the parsers take): syncagent(1), syncagent.job(5), syncagent.toml(5).
install: release
	@set -e; bin=$(RELEASE_BINARY); \
	gen=$$(mktemp -d); trap 'rm -rf "$$gen"' EXIT; \
	for shell in bash zsh fish; do "$$bin" --generate-completion-script $$shell > "$$gen/$$shell"; done; \
	exec_start='ExecStart=$(subst %,%%,$(bindir))/syncagent run'; \
	sed -e "s|^ExecStart=%h/.local/bin/syncagent run\$$|$$exec_start|" \
	    -e 's|^Documentation=.*|Documentation=man:syncagent(1) file://$(docdir)/README.md|' \
	    contrib/syncagent.service > "$$gen/syncagent.service"; \
	grep -qxF "$$exec_start" "$$gen/syncagent.service" || \
	  { echo "contrib/syncagent.service: no ExecStart to point at $(bindir)/syncagent" >&2; exit 1; }; \
	install -D -m 755 "$$bin"                    "$(DESTDIR)$(bindir)/syncagent"; \
	install -D -m 644 docs/man/syncagent.1       "$(DESTDIR)$(man1dir)/syncagent.1"; \
	install -D -m 644 docs/man/syncagent.job.5   "$(DESTDIR)$(man5dir)/syncagent.job.5"; \
	install -D -m 644 docs/man/syncagent.toml.5  "$(DESTDIR)$(man5dir)/syncagent.toml.5"; \
	install -D -m 644 "$$gen/bash"               "$(DESTDIR)$(bashcompdir)/syncagent"; \
	install -D -m 644 "$$gen/zsh"                "$(DESTDIR)$(zshcompdir)/_syncagent"; \
	install -D -m 644 "$$gen/fish"               "$(DESTDIR)$(fishcompdir)/syncagent.fish"; \
	install -D -m 644 "$$gen/syncagent.service"  "$(DESTDIR)$(userunitdir)/syncagent.service"; \
	install -D -m 644 config/syncagent.toml      "$(DESTDIR)$(exampledir)/config.toml.example"; \
	install -D -m 644 README.md                  "$(DESTDIR)$(docdir)/README.md"; \
	for page in $(REFERENCE); do install -D -m 644 "$$page" "$(DESTDIR)$(docdir)/$$page"; done
	@printf 'installed %s\n' $(foreach file,$(INSTALLED),"$(DESTDIR)$(file)")

# Exactly the files install wrote, and the folders only syncagent uses, once empty.
uninstall:
	rm -f $(foreach file,$(INSTALLED),"$(DESTDIR)$(file)")
	@for dir in "$(DESTDIR)$(exampledir)" "$(DESTDIR)$(docdir)/docs" "$(DESTDIR)$(docdir)"; do \
	  [ ! -d "$$dir" ] || rmdir --ignore-fail-on-non-empty "$$dir"; done

# Every system call goes through Sources/SyncAgent/Posix/Posix.swift (DESIGN.md
# §3, §5): lists each one made anywhere else under Sources/, without a build.
# The names, the fewest arguments each takes and the files still exempt are
# read from Tests/SyncAgentTests/SyscallRuleTests.swift, whose test is the
# same check (and the stricter one: it also looks inside interpolations).
# Comments and strings are blanked; then NAME( counts unless after a dot
# (Glibc.NAME( does count) or `func`, or with fewer arguments than the C
# function takes, or a labelled one (Swift's own: stat(), open(flags: …)).
SYSCALL_RULES := Tests/SyncAgentTests/SyscallRuleTests.swift
define SYSCALL_CHECK
local $$/; open(R, "<", shift) or die "$$!"; $$r = <R>; close R;
sub list { $$r =~ /static let $$_[0]\b[^=]*= \[(.*?)\]/s or die "no $$_[0] in the rules"; $$1 }
%names = map { $$_ => 1 } (list("names") =~ /"(\w+)"/g);
%fewest = (list("fewestArguments") =~ /"(\w+)": (\d+)/g);
%exempt = map { $$_ => 1 } (list("exempt") =~ /"([^"]+)"/g);
%modules = map { $$_ => 1 } (list("cModules") =~ /"(\w+)"/g);
$$r =~ /static let home = "([^"]+)"/ and $$exempt{$$1} = 1;
$$bad = 0;
for $$f (sort grep { !$$exempt{$$_} } split /\n/, `find Sources -name '*.swift'`) {
    open(F, "<", $$f) or die "$$f: $$!"; $$s = <F>; close F;
    $$s =~ s{("""[\s\S]*?"""|"(?:\\.|[^"\\\n])*"|//[^\n]*|/\*[\s\S]*?\*/)}{($$t = $$1) =~ s/[^\n]/ /g; $$t}ge;
    while ($$s =~ /(?<!\w)(\w+) *\(/g) {
        ($$name, $$at, $$open) = ($$1, $$-[1], $$+[0] - 1);
        next unless $$names{$$name};
        $$before = substr($$s, 0, $$at);
        if ($$before =~ /(\w*)\s*\.\s*$$/) { next unless $$modules{$$1} }
        next if $$before =~ /\bfunc\s+$$/;
        ($$depth, $$count, $$labelled, $$starts) = (0, 0, 0, 1);
        for ($$i = $$open + 1; $$i < length $$s; $$i++) {
            $$c = substr($$s, $$i, 1);
            if ($$c =~ /[(\[{]/) { $$depth++ } elsif ($$c =~ /[)\]}]/) { last if $$depth-- == 0 }
            elsif ($$c eq ",") { $$starts = 1 if $$depth == 0 }
            elsif ($$depth == 0 && $$starts && $$c !~ /\s/) {
                $$starts = 0; $$count++;
                $$labelled = 1 if substr($$s, $$i) =~ /^\w+ *:(?!:)/;
            }
        }
        next if $$labelled || $$count < ($$fewest{$$name} // 1);
        $$line = 1 + ($$before =~ tr/\n//);
        print "$$f:$$line: $$name(\n"; $$bad = 1;
    }
}
exit $$bad;
endef
export SYSCALL_CHECK

check-syscalls:
	@perl -e "$$SYSCALL_CHECK" $(SYSCALL_RULES) \
	  || { echo "system calls outside Posix.swift: use a Posix wrapper, or add one there" >&2; exit 1; }

# libFuzzer (with AddressSanitizer) over every parser of outside input, for
# FUZZ_SECONDS; new inputs that reach new code are merged into fuzz/corpus,
# which `make test` runs once. A crash leaves fuzz/crash-* to reproduce with
# the same binary (and to add to fuzz/corpus once fixed).
FUZZ_SECONDS ?= 300
FUZZ_BUILD := .build-fuzz
fuzz: deps
	set -o pipefail; SYNCAGENT_FUZZ=1 swift build --scratch-path $(FUZZ_BUILD) --product syncagent-fuzz \
	  -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library 2>&1 | grep -v "Cannot export local symbol"
	rm -rf $(FUZZ_BUILD)/found && mkdir -p $(FUZZ_BUILD)/found
	"$$(SYNCAGENT_FUZZ=1 swift build --scratch-path $(FUZZ_BUILD) --show-bin-path)/syncagent-fuzz" \
	  $(FUZZ_BUILD)/found fuzz/corpus -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -artifact_prefix=fuzz/crash-
	"$$(SYNCAGENT_FUZZ=1 swift build --scratch-path $(FUZZ_BUILD) --show-bin-path)/syncagent-fuzz" \
	  -merge=1 fuzz/corpus $(FUZZ_BUILD)/found

# Compares syncagent with curl, aria2c and URLSession in one run; writes bench/results.md.
bench: bench-deps
	YTDLP=$(CURDIR)/$(VENV)/bin/yt-dlp python3 bench/run.py

# make bench-ab BEFORE=REVISION: that revision's build against the working tree's, same run.
bench-ab: bench-deps
	python3 bench/ab.py --before $(BEFORE)

clean:
	rm -rf .build $(FUZZ_BUILD) $(INSTALL_TEST_BUILD) $(VENV)
