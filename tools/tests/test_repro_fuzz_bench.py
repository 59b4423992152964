"""The reproducer, the fuzzer, the benchmark and the decode demo, run through
apply_and_test.sh.

These run the tools the way README tells users to, on the default checkout
built from the installed wheel, patched and (where it shows the bug)
unpatched.
"""
import json
import sys

import pytest

from conftest import REPO_ROOT


@pytest.fixture
def run_tool(tools):
  """`apply_and_test.sh [--unpatched] --run python ARGS...`, printing output."""

  def run(*args, unpatched=False, cwd=REPO_ROOT):
    options = ['--unpatched'] if unpatched else []
    proc = tools.run('apply_and_test.sh',
                     *options,
                     '--run',
                     'python',
                     *args,
                     cwd=cwd)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr[-3000:])
    return proc

  return run


def rows_of(stdout):
  """(scenario, step, tensor) -> status from repro_8832.py's table."""
  rows = {}
  for line in stdout.splitlines():
    parts = line.split()
    if len(parts) >= 4 and parts[0] in ('unbind', 'view_reshape'):
      # step may be two words ("compiled again")
      if parts[1] == 'compiled' and parts[2] == 'again':
        step, rest = 'compiled again', parts[3:]
      else:
        step, rest = parts[1], parts[2:]
      rows[(parts[0], step, rest[0])] = rest[1]
  return rows


def test_repro_patched_every_row_ok(run_tool):
  proc = run_tool('tools/repro_8832.py')
  assert proc.returncode == 0
  rows = rows_of(proc.stdout)
  # 2 scenarios x 3 steps x (2 views + the base)
  assert len(rows) == 18, rows
  assert set(rows.values()) == {'ok'}, rows


def test_repro_unpatched_shows_the_bug(run_tool):
  proc = run_tool('tools/repro_8832.py', unpatched=True)
  assert proc.returncode == 1
  rows = rows_of(proc.stdout)
  # (a) the reported unbind views: AOTAutograd's assertion on the first call.
  assert rows[('unbind', 'compiled', '-')] == 'crash'
  assert 'AssertionError in runtime_wrappers.py' in proc.stdout
  # (b) view/reshape views: runs, but kv_cache[1] never gets the values.
  assert rows[('view_reshape', 'compiled', 'kv_cache[1].reshape')] == 'WRONG'
  assert rows[('view_reshape', 'compiled', 'kv_cache')] == 'WRONG'


@pytest.mark.slow
def test_bench_smoke(run_tool, tmp_path):
  # Small sizes, few steps, no timing assertions: the tool runs, every mode
  # writes the right rows of two layers with reads between, and the plot is
  # written. Two patterns of four: test_dynamo_kv_cache_inplace.py has all.
  out, png = tmp_path / 'after.json', tmp_path / 'plot.png'
  proc = run_tool('tools/bench_kv_cache.py', '--sizes', '1', '--steps', '5',
                  '--modes', 'sep,view,base,layer', '--patterns',
                  'index_copy0,index_copy2', '--layers', '2', '--read',
                  '--json', str(out), '--plot', str(png))
  assert proc.returncode == 0
  rows = json.loads(out.read_text())
  assert len(rows) == 4 * 2
  assert all(r.get('correct') for r in rows), rows
  assert png.stat().st_size > 0


def test_bench_compile_smoke(run_tool, tools, tmp_path):
  # Two layers, a few steps, beside 3 more live tensors, no timing
  # assertions: each layout runs on the series; on stock, separate tensors
  # run and views of one pool raise (pytorch/xla#8832), and the ratios to
  # stock are given.
  out = tmp_path / 'compile.json'
  stock = tools.run('apply_and_test.sh', '--unpatched', '--run', 'printenv',
                    'PYTHONPATH').stdout.strip()
  proc = run_tool('tools/bench_compile.py', '--layers', '2', '--steps', '3',
                  '--live', '3', '--stock', stock, '--json', str(out))
  assert proc.returncode == 0
  rows = {(r['torch_xla'], r['layout']): r for r in json.loads(out.read_text())}
  assert len(rows) == 8
  for layout in ('sep', 'kept', 'retaken', 'report'):
    series = rows['series', layout]
    # A call an execution; views taken again from the pool sync first.
    executions = 4 if layout == 'retaken' else 2
    assert series['runs'] == 1 and series['executions'] == executions, series
    assert series['warm_vs_sep'] > 0 and series['live'] == 3, series
  assert rows['stock', 'sep']['runs'] == 1
  assert rows['stock', 'kept']['runs'] == 0


def test_bench_no_views_smoke(tools, tmp_path):
  # One short round: each graph timed on the series and on stock's bridge,
  # the donating ones again beside 10 other live tensors.
  out = tmp_path / 'no_views.json'
  tools.run('bench_no_views.py',
            '--rounds',
            '1',
            '--calls',
            '5',
            '--live',
            '10',
            '--json',
            str(out),
            check=0)
  rows = json.loads(out.read_text())['rows']
  assert len(rows) == 7, rows
  assert rows[-1]['graph'].endswith(', 10 live tensors'), rows
  assert all(r['stock'] > 0 and r['series'] > 0 for r in rows), rows


def test_decode_demo_smoke_patched(run_tool, tmp_path):
  # A few tokens, the StaticCache (longer than the tokens) and the paged
  # per-layer views: the compiled decode gives the CPU reference's tokens and
  # cache.
  out = tmp_path / 'decode.json'
  proc = run_tool('tools/decode_demo.py', '--tokens', '4', '--layouts', 'a,c1',
                  '--cache-len', '64', '--json', str(out))
  assert proc.returncode == 0
  rows = json.loads(out.read_text())
  assert [r['layout'] for r in rows] == ['a', 'c1']
  assert all(r['tokens_equal'] and r['cache_equal'] for r in rows), rows
