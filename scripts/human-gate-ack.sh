#!/bin/sh
# human-gate-ack.sh gate <id> "<msg>" | approve <id> | reject <id>  (BSI v3, over `nika-brain gate`)
# Runs from any folder: the brain is the parent of this script's folder unless NIKA_BRAIN_DIR is set.
# NIKA_BRAIN overrides the command (say "python3 -m nika_brain").
: "${NIKA_BRAIN_DIR:=$(cd "$(dirname "$0")/.." && pwd)}"
export NIKA_BRAIN_DIR

case "$1" in
    gate) shift; exec ${NIKA_BRAIN:-nika-brain} gate open "$@" ;;
    approve|reject) exec ${NIKA_BRAIN:-nika-brain} gate "$@" ;;
    *) echo "usage: $0 gate <id> \"<msg>\" | approve <id> | reject <id>" >&2; exit 2 ;;
esac
