#!/usr/bin/env bash
# one H200 call: the gpu tests, and the differential corpus on gpu fp32 / fp16 in four parts at once
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEGRAPH_CORPUS_CACHE=/tmp/corpus
parts=("vision,vision-text,detection,segmentation" "decoder,decoder kv-cache,encoder"
       "cnn,control flow,graph,encoder-decoder,speech encoder,speech encoder-decoder"
       "rnn,int8 qdq,int8 dynamic,fp16,conv1d,speech front-end,tokens")
for i in 0 1 2 3; do
  (timeout 420 python benchmarks/corpus_table.py --targets gpu,gpu-fp16 --families "${parts[$i]}" --part p$i \
     > /dev/null 2> "$OUT/rows$i.log") &
done
timeout 420 python -m pytest -q -p no:cacheprovider -n 8 tests/targets/gpu tests/targets/test_nonfinite.py \
  tests/ops/test_index_range.py tests/targets/test_dynamic_shapes.py > "$OUT/gpu_tests.log" 2>&1
echo "pytest rc=$?"
wait
python - "$OUT" <<'PY'
import glob, json, sys
files = sorted(glob.glob("benchmarks/results/corpus_table-gpu-gpu-fp16-p*-*.json"))
rows = [r for f in files for r in json.load(open(f))["rows"]]
d = json.load(open(files[0])) if files else {}
d.update(benchmark="corpus_table-gpu-gpu-fp16", rows=rows, parts=len(files))
json.dump(d, open(f"{sys.argv[1]}/corpus_table-gpu-gpu-fp16-h200.json", "w"), indent=2)
print(len(files), "parts,", len(rows), "rows")
PY
grep -hE "^# " "$OUT"/rows*.log | grep -vE ": pass [^,]*, pass" ; grep -E "passed|failed" "$OUT/gpu_tests.log" | tail -2
grep -E "^(FAILED|ERROR)" "$OUT/gpu_tests.log" | head -30
