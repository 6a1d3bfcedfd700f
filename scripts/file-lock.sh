#!/bin/sh
# file-lock.sh acquire|release|renew|status <scope>  (BSI v3, over `nika-brain lock`; owner: $NIKA_CLAIM)
# Runs from any folder: the brain is the parent of this script's folder unless NIKA_BRAIN_DIR is set.
# NIKA_BRAIN overrides the command (say "python3 -m nika_brain").
: "${NIKA_BRAIN_DIR:=$(cd "$(dirname "$0")/.." && pwd)}"
export NIKA_BRAIN_DIR

case "$1" in
    acquire|release|renew|status) exec ${NIKA_BRAIN:-nika-brain} lock "$@" ;;
    *) echo "usage: $0 acquire|release|renew|status <scope>" >&2; exit 2 ;;
esac
