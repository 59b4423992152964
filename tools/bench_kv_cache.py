#!/usr/bin/env python3
"""KV-cache write benchmark: compiled donated writes through views of a cache.

One step = the compiled write + torch_xla.sync() + wait_device_ops(), the
way a serving loop runs it.  Modes (how the cache reaches the compiled
function, which donates it with dynamo_set_buffer_donor_):

  sep   two separate tensors, k_cache and v_cache
  view  k_cache, v_cache = cache: the unbind views of one cache, taken once
        and passed in every step
  base  the cache itself, written through cache[0] and cache[1] inside
  layer with --layers L: one function compiled once and called on each
        layer's view cache[l] in turn (taken once), as a per-layer attention
        is; not run unless asked for with --modes.  Its child also times
        `layer_tensors`, a step of each in turn ("tensors ms")
  layer_tensors  the same function on one (2, ...) tensor a layer: what
        `layer` costs without one allocation for all layers
  layer_kv, layer_kv_tensors  the same with two views a call, the report's
        write(k_cache, v_cache, ...) on each layer's `k, v = cache[l]`

With --layers L (default 1) a step writes L layers: `sep` has 2L tensors,
`view` and `base` one allocation of shape (L, 2, ...), every layer's k and v
views of it (`view`: taken once with unbind, `base`: cache[l, 0] inside).
With --read, each layer reads 5 rows of its k and v back (index_select)
after its writes and before the next layer's, as attention does; the step
returns them.  `--layers 2 --read` is a decoder's one-allocation layout.

Write patterns (4 tokens per step):

  index_copy0   vLLM: k_cache.flatten(0, 1).index_copy_(0, slots, k) on a
                (blocks, 16, 8 heads, 64) cache
  index_copy2   static cache: k_cache.index_copy_(2, positions, k) on a
                (1, 8 heads, seq, 64) cache
  slice         k_cache[:, :, pos:pos + 4] = k on the static cache (pos is a
                Python int, fixed, so that Dynamo does not recompile)
  index_put     k_cache.flatten(0, 1).index_put_((slots,), k), vLLM layout

For each (mode, pattern, cache size) a child process warms up, then runs the
steps and reports: median step time, XLA executions per step (ExecuteTime
count), compilations after warm-up (CompileTime count), resident memory
growth over the steps, and whether the written rows read back right.  With
--rounds R every child runs R times, all of one round before the next, and
the table gives the median of each one's R step times (this machine's step
times drift between processes more than between modes of one round).

  tools/apply_and_test.sh --unpatched --run python tools/bench_kv_cache.py \\
      --json before.json
  tools/apply_and_test.sh --run python tools/bench_kv_cache.py \\
      --json after.json --before before.json --plot kv_cache.png
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

MODES = ('sep', 'view', 'base')  # the default; 'layer' when asked for
PATTERNS = ('index_copy0', 'index_copy2', 'slice', 'index_put')
BLOCK, HEADS, HEAD_DIM, TOKENS = 16, 8, 64, 4
MIB = 1 << 20


def cache_shape(pattern, mib):
  """Shape of one half (k or v) of a cache of `mib` MiB in total."""
  elements = int(mib * MIB) // 4 // 2
  if pattern in ('index_copy0', 'index_put'):
    return (elements // (BLOCK * HEADS * HEAD_DIM), BLOCK, HEADS, HEAD_DIM)
  return (1, HEADS, elements // (HEADS * HEAD_DIM), HEAD_DIM)


def make_write(pattern, pos):
  import torch

  def write(cache, x, index):
    if pattern == 'index_copy0':
      cache.flatten(0, 1).index_copy_(0, index, x)
    elif pattern == 'index_put':
      cache.flatten(0, 1).index_put_((index,), x)
    elif pattern == 'index_copy2':
      cache.index_copy_(2, index, x)
    else:
      cache[:, :, pos:pos + TOKENS] = x

  return write


def child(mode, pattern, mib, steps, warmup, layers, read):
  import psutil
  import torch
  import torch_xla
  import torch_xla.core.xla_model as xm
  import torch_xla.debug.metrics as met

  device = torch_xla.device()
  half = cache_shape(pattern, mib / layers)
  if pattern in ('index_copy0', 'index_put'):
    x_shape = (TOKENS, HEADS, HEAD_DIM)
    rows = half[0] * BLOCK
    index_cpu = torch.tensor([0, rows // 3, rows // 2 + 1, rows - 1])
  else:
    x_shape = (1, HEADS, TOKENS, HEAD_DIM)
    index_cpu = torch.tensor([0, 1, half[2] // 2, half[2] - 1])
  pos = half[2] - TOKENS if pattern == 'slice' else 0
  write = make_write(pattern, pos)
  donate = torch.ops.xla.dynamo_set_buffer_donor_

  rows = torch.tensor([0, 1, 2, 3, 5]).to(device)

  def write_layers(caches, k, v, index):
    reads = []
    for k_cache, v_cache in caches:
      write(k_cache, k, index)
      write(v_cache, v, index)
      if read:
        reads += [
            c.flatten(0, -2).index_select(0, rows) for c in (k_cache, v_cache)
        ]
    return torch.stack(reads) if read else None

  def write_pair(*args):
    for cache in args[:-3]:
      donate(cache, True)
    return write_layers(list(zip(args[:-3:2], args[1:-3:2])), *args[-3:])

  def write_base(cache, k, v, index):
    donate(cache, True)
    return write_layers([(layer[0], layer[1]) for layer in cache], k, v, index)

  def write_layer(layer, k, v, index):
    donate(layer, True)
    return write_layers([(layer[0], layer[1])], k, v, index)

  def write_kv(k_cache, v_cache, k, v, index):
    donate(k_cache, True)
    donate(v_cache, True)
    return write_layers([(k_cache, v_cache)], k, v, index)

  k = torch.randn(x_shape).to(device)
  v = torch.randn(x_shape).to(device)
  index = index_cpu.to(device)

  def setup(mode):
    """The compiled function of `mode`, its calls a step, its k, v halves."""
    if mode == 'sep':
      tensors = [torch.zeros(half, device=device) for _ in range(2 * layers)]
    elif mode.endswith('_tensors'):  # one (2, ...) tensor a layer
      layer_views = [
          torch.zeros((2,) + half, device=device) for _ in range(layers)
      ]
      tensors = [half for layer in layer_views for half in layer]
    else:
      cache = torch.zeros((layers, 2) + half, device=device)
      tensors = [half for layer in cache for half in layer]
      layer_views = list(cache)
    if mode == 'base':
      return torch.compile(write_base,
                           backend='openxla'), [(cache, k, v, index)], tensors
    if mode.startswith('layer_kv'):  # k, v = cache[l], taken once
      return torch.compile(write_kv, backend='openxla'), [
          (*layer, k, v, index) for layer in layer_views
      ], tensors
    if mode.startswith('layer'):
      return torch.compile(write_layer, backend='openxla'), [
          (layer, k, v, index) for layer in layer_views
      ], tensors
    # view: taken once, as in the report (#8832) and a serving loop
    return torch.compile(write_pair,
                         backend='openxla'), [(*tensors, k, v, index)], tensors

  # `layer` is timed against `layer_tensors` step by step in one process.
  pooled = mode in ('layer', 'layer_kv')
  arms = [setup(m) for m in [mode] + [mode + '_tensors'] * pooled]
  torch_xla.sync()
  xm.wait_device_ops()

  def step(fn, calls, tensors):
    for args in calls:
      fn(*args)
    torch_xla.sync()
    xm.wait_device_ops()

  for fn, calls, _ in arms:
    fn(*calls[0])  # the first layer's compilation, then the others'
  xm.wait_device_ops()
  first = (met.metric_data('CompileTime') or [0])[0]
  for _ in range(warmup):
    for arm in arms:
      step(*arm)
  later = (met.metric_data('CompileTime') or [0])[0] - first
  met.clear_metrics()
  compiles = (met.metric_data('CompileTime') or [0])[0]
  process = psutil.Process()
  rss = [process.memory_info().rss]
  times, executions = [[] for _ in arms], [0] * len(arms)
  count = lambda: (met.metric_data('ExecuteTime') or [0])[0]
  for _ in range(steps):
    for i, arm in enumerate(arms):
      before, start = count(), time.perf_counter()
      step(*arm)
      times[i].append(time.perf_counter() - start)
      executions[i] += count() - before
    rss.append(process.memory_info().rss)
  compiles = (met.metric_data('CompileTime') or [0])[0] - compiles

  def correct(tensors):
    """Whether the rows written last read back as k and v (last layer's)."""
    k_half, v_half = tensors[-2].cpu(), tensors[-1].cpu()
    if pattern in ('index_copy0', 'index_put'):
      got_k, got_v = (k_half.flatten(0, 1)[index_cpu],
                      v_half.flatten(0, 1)[index_cpu])
    elif pattern == 'index_copy2':
      got_k, got_v = k_half[:, :, index_cpu], v_half[:, :, index_cpu]
    else:
      got_k, got_v = (k_half[:, :, pos:pos + TOKENS],
                      v_half[:, :, pos:pos + TOKENS])
    return torch.equal(got_k, k.cpu()) and torch.equal(got_v, v.cpu())

  result = dict(median_ms=statistics.median(times[0]) * 1e3,
                executions_per_step=executions[0] / steps,
                compiles_after_first_call=later,
                compiles_after_warmup=compiles,
                rss_growth_mib=(max(rss[1:]) - rss[1]) / MIB,
                rss_mib=rss[-1] / MIB,
                correct=all(correct(arm[2]) for arm in arms))
  if pooled:
    result['tensors_ms'] = statistics.median(times[1]) * 1e3
  return result


def run_one(mode, pattern, mib, args, env):
  cmd = [
      sys.executable, __file__, '--child', mode, pattern,
      str(mib), f'--steps={args.steps}', f'--warmup={args.warmup}',
      f'--layers={args.layers}'
  ] + ['--read'] * args.read
  proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
  row = dict(mode=mode, pattern=pattern, mib=mib)
  for line in proc.stdout.splitlines():
    if line.startswith('RESULT '):
      return dict(row, **json.loads(line[7:]))
  last = (proc.stderr.strip().splitlines() or [''])[-1]
  return dict(row, error=f'exit {proc.returncode}: {last[:100]}')


def merge_rounds(rows):
  """One row per (mode, pattern, size) of `--rounds` rows: the median of the
  rounds' step times (each in `rounds_ms`), the worst of the rest; the first
  error if a round had one."""
  groups = {}
  for r in rows:
    groups.setdefault((r['mode'], r['pattern'], r['mib']), []).append(r)
  merged = []
  for group in groups.values():
    errors = [r for r in group if 'error' in r]
    if errors or len(group) == 1:
      merged.append((errors or group)[0])
      continue
    worst = {
        k: max(r[k] for r in group) for k in
        ('executions_per_step', 'compiles_after_first_call',
         'compiles_after_warmup', 'rss_growth_mib', 'rss_mib')
    }
    ms = [r['median_ms'] for r in group]
    row = dict(group[0],
               **worst,
               median_ms=statistics.median(ms),
               rounds_ms=ms,
               correct=all(r['correct'] for r in group))
    if 'tensors_ms' in row:
      row['rounds_tensors_ms'] = [r['tensors_ms'] for r in group]
      row['tensors_ms'] = statistics.median(row['rounds_tensors_ms'])
    merged.append(row)
  return merged


def print_table(rows, before=None):
  before = {(r['mode'], r['pattern'], r['mib']): r for r in before or []}
  header = [
      'pattern', 'mode', 'MiB', 'before ms', 'ms', 'tensors ms', 'exec/step',
      'compiles after 1st call', 'compiles', 'rss +MiB', 'check'
  ]
  lines = [header]
  for r in rows:
    b = before.get((r['mode'], r['pattern'], r['mib']))
    b_ms = ('-' if b is None else
            f"{b['median_ms']:.2f}" if 'median_ms' in b else 'crash')
    if 'error' in r:
      lines.append([
          r['pattern'], r['mode'],
          str(r['mib']), b_ms, 'crash', '', '', '', '', '', r['error'][:40]
      ])
      continue
    lines.append([
        r['pattern'], r['mode'],
        str(r['mib']), b_ms, f"{r['median_ms']:.2f}",
        f"{r['tensors_ms']:.2f}" if 'tensors_ms' in r else '-',
        f"{r['executions_per_step']:.2f}",
        str(r.get('compiles_after_first_call', '-')),
        str(r['compiles_after_warmup']), f"{r['rss_growth_mib']:.1f}",
        'ok' if r['correct'] else 'WRONG'
    ])
  widths = [max(len(l[i]) for l in lines) for i in range(len(header))]
  for l in lines:
    print('  '.join(c.rjust(w) for c, w in zip(l, widths)))


def plot(rows, before, path):
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  patterns = [p for p in PATTERNS if any(r['pattern'] == p for r in rows)]
  fig, axes = plt.subplots(1,
                           len(patterns),
                           figsize=(4.2 * len(patterns) + 1, 4),
                           sharey=True,
                           squeeze=False)
  axes = axes[0]
  colors = dict(sep='tab:green',
                view='tab:blue',
                base='tab:orange',
                layer='tab:red')
  for ax, pattern in zip(axes, patterns):
    for label, data, style in (('before', before or
                                [], '--'), ('after', rows, '-')):
      for mode in colors:
        pts = sorted((r['mib'], r['median_ms'])
                     for r in data
                     if r['mode'] == mode and r['pattern'] == pattern and
                     'median_ms' in r)
        crashed = any(
            r['mode'] == mode and r['pattern'] == pattern and 'error' in r
            for r in data)
        if pts:
          ax.plot(*zip(*pts),
                  style,
                  marker='o',
                  color=colors[mode],
                  label=f'{mode} ({label})')
        elif crashed:
          ax.plot([], [],
                  style,
                  color=colors[mode],
                  label=f'{mode} ({label}): crashed')
    ax.set_xscale('log')
    ax.set_yscale('log')
    ax.set_title(pattern)
    ax.set_xlabel('cache size (MiB)')
    ax.grid(True, which='both', alpha=0.3)
  axes[0].set_ylabel('median step time (ms)')
  axes[-1].legend(fontsize=7)
  fig.suptitle('KV-cache writes through donated views\ntorch_xla 2.9.0, PJRT '
               'CPU (before: stock, after: series)')
  fig.tight_layout()
  fig.savefig(path, dpi=100)


def main():
  parser = argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--sizes',
                      default='4,16,64,256',
                      help='cache sizes in MiB, comma separated')
  parser.add_argument('--modes', default=','.join(MODES))
  parser.add_argument('--patterns', default=','.join(PATTERNS))
  parser.add_argument('--steps', type=int, default=100)
  parser.add_argument('--warmup', type=int, default=3)
  parser.add_argument('--layers', type=int, default=1, help='layers a step')
  parser.add_argument('--read',
                      action='store_true',
                      help="read each layer's rows back after its writes")
  parser.add_argument('--rounds',
                      type=int,
                      default=1,
                      help='run every child this many times, interleaved, '
                      'and report the median')
  parser.add_argument('--json', help='write the results here')
  parser.add_argument('--before', help='results of a run without the series')
  parser.add_argument('--plot', help='write a PNG plot here')
  parser.add_argument('--results',
                      metavar='JSON',
                      help='print and plot these saved results, run nothing')
  parser.add_argument('--child', nargs=3, help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.child:
    mode, pattern, mib = args.child
    result = child(mode, pattern, int(mib), args.steps, args.warmup,
                   args.layers, args.read)
    print('RESULT ' + json.dumps(result), flush=True)
    return 0

  env = dict(os.environ)
  env.setdefault('PJRT_DEVICE', 'CPU')
  rows = []
  if args.results:
    with open(args.results) as f:
      rows = json.load(f)
  for _ in range(0 if args.results else args.rounds):
    for pattern in args.patterns.split(','):
      for mode in args.modes.split(','):
        for mib in [int(s) for s in args.sizes.split(',')]:
          row = run_one(mode, pattern, mib, args, env)
          rows.append(row)
          print(json.dumps(row), file=sys.stderr, flush=True)
  rows = merge_rounds(rows)
  before = None
  if args.before:
    with open(args.before) as f:
      before = json.load(f)
  if not args.results:
    import torch_xla
    print(f'torch_xla from {os.path.dirname(torch_xla.__file__)}; '
          f'{args.steps} steps after {args.warmup} warm-up steps, '
          f'{args.layers} layer(s){", reads between" if args.read else ""}')
  print_table(rows, before)
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(rows, f, indent=1)
  if args.plot:
    plot(rows, before, args.plot)
    print(f'plot: {args.plot}')
  bad = [r for r in rows if 'error' in r or not r['correct']]
  return 1 if bad else 0


if __name__ == '__main__':
  sys.exit(main())
