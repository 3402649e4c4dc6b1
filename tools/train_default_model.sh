#!/usr/bin/env bash
# Trains the repository's default model, models/performer-fortunes, from
# scratch: the exact command models/README.md records (corpus, shape,
# schedule, seed). About 45 minutes on 2 CPU cores.
# Installs what it needs (Debian packages, including `fortunes`) when missing.
#
#   bash tools/train_default_model.sh [OUT_DIR] [extra performer-train flags]
#
# OUT_DIR defaults to models/performer-fortunes. Checkpoints go to
# build/train-default/checkpoints every 200 steps; RESUME=1 continues an
# interrupted run from the latest one with the same loss curve.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
BUILD_DIR="${BUILD_DIR:-build}"
OUT="${1:-models/performer-fortunes}"
shift || true
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target performer-train
WORK="$BUILD_DIR/train-default"
mkdir -p "$WORK"
python3 tools/fortunes_corpus.py "$WORK/fortunes.txt" --seed=0
COMMON=(--corpus="$WORK/fortunes.txt" --out="$OUT" --checkpoint_dir="$WORK/checkpoints"
        --steps=1600 --val_every=200 --val_windows=64 --checkpoint_every=200 --dtype=bf16)
if [ "${RESUME:-0}" = 1 ]; then
  # The shape, optimizer and schedule come from the checkpoint.
  "$BUILD_DIR/tools/performer-train" "${COMMON[@]}" --resume="$WORK/checkpoints" "$@"
else
  "$BUILD_DIR/tools/performer-train" "${COMMON[@]}" \
    --dim=192 --depth=4 --heads=6 --dim_head=32 --local_attn_heads=2 --local_window_size=64 \
    --nb_features=64 --max_seq_len=2048 --feature_redraw_interval=1000 \
    --seq_len=512 --batch_size=8 --lr=2e-3 --warmup_steps=100 --min_lr_ratio=0.05 \
    --weight_decay=0.1 --clip_norm=1.0 --seed=0 "$@"
fi
cat >"$OUT/generation_config.json" <<'JSON'
{
  "max_new_tokens": 200,
  "temperature": 0.6,
  "top_k": 40
}
JSON
# The chat template (server/repository/chat_template.h): the riddles'
# "Q:<tab>" / "A:<tab>" lines; a turn ends at the end of its line.
cat >"$OUT/chat_template.json" <<'JSON'
{
  "system": "{content}\n",
  "user": "Q:\t{content}\n",
  "assistant": "A:\t{content}\n",
  "generation_prompt": "A:\t",
  "stop": ["\n"]
}
JSON
echo "train_default_model: wrote $OUT"
