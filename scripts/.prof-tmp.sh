mkdir -p /tmp/b && rm -rf /tmp/b/* && tar xJf gpu-all/bundle.tar.xz -C /tmp/b && cd /tmp/b
export CUDA_DEVICE_MAX_CONNECTIONS=32 PURLIN_CUBIN_DIR=$PWD/cubin
NCU=/usr/local/cuda/bin/ncu
for c in ar ag; do
k=purlin_all_reduce; [ $c = ag ] && k=purlin_all_gather
timeout 200 $NCU --clock-control none --set full --warp-sampling-interval 0 --import-source no -k regex:$k -s 2 -c 1 -o $OUT/${c}_w1 bin/purlin-bench $c 128 128 0 4 0 --ranks 1 > $OUT/ncu_$c.log 2>&1; echo rc=$?
$NCU -i $OUT/${c}_w1.ncu-rep --page source --print-source sass --csv > $OUT/${c}_w1_sass.csv 2>&1
$NCU -i $OUT/${c}_w1.ncu-rep --page details --csv > $OUT/${c}_w1_details.csv 2>&1
OUTF=$OUT/${c}_w1_sass.csv python3 - <<'PY'
import csv,os
rows=list(csv.reader(open(os.environ['OUTF'])))
hdr=rows[1]; i=hdr.index('Warp Stall Sampling (All Samples)'); s=hdr.index('Source')
st=[k for k,h in enumerate(hdr) if h.startswith('stall_')]
def n(x):
    try: return float(x.replace(',',''))
    except: return 0
body=[r for r in rows[2:] if len(r)>i]
tot=sum(n(r[i]) for r in body)
print(rows[0][1],'samples',tot)
agg={hdr[k]:sum(n(r[k]) for r in body) for k in st}
print(sorted([(v,k) for k,v in agg.items() if v],reverse=True)[:12])
for r in sorted(body,key=lambda r:-n(r[i]))[:20]: print(int(n(r[i])), r[0][-5:], r[s][:80], [hdr[k] for k in st if n(r[k])>0.3*n(r[i])])
PY
done
grep -E '"Duration"|SM Active Cycles' $OUT/*_details.csv | awk -F'","' '{print $5, $13, $15}'
