#!/bin/sh
# Linker driver for the workspace (see .cargo/config.toml).
# When the link carries one of our version scripts (*.map), remove the
# version script rustc generated so ours alone decides exports and versions.
ours=0
for a in "$@"; do
  case "$a" in *--version-script=*.map) ours=1 ;; esac
done
if [ "$ours" = 1 ]; then
  for a in "$@"; do
    shift
    case "$a" in
      *--version-script=*.map) set -- "$@" "$a" ;;
      *--version-script=*) ;;
      *) set -- "$@" "$a" ;;
    esac
  done
fi
exec "${CC:-cc}" "$@"
