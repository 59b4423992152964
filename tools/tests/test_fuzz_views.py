"""The fuzzer, tools/fuzz_views.py: its verdicts, its programs' validity
under CPU eager, its child processes, and a smoke run on stock and the
series."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO_ROOT, TOOLS
import fuzz_views

FUZZER = os.path.join(TOOLS, 'fuzz_views.py')
# Runs programs with CPU tensors for the XLA ones, eager for compiled: CPU
# eager must run every program (else it is invalid, a bug of the fuzzer).
CPU_ONLY = '''
import sys, types
import torch
sys.modules['torch_xla'] = types.SimpleNamespace(device=lambda: 'cpu',
                                                 sync=lambda: None)
torch.ops.xla = types.SimpleNamespace(
    dynamo_set_buffer_donor_=lambda tensor, donate: tensor)
torch.compile = lambda fn, **kwargs: fn
sys.path.insert(0, sys.argv[1])
import fuzz_views
families = sys.argv[3].split(',') if sys.argv[3:] else fuzz_views.FAMILIES
for seed in range(int(sys.argv[2])):
  script = fuzz_views.Program(seed, tuple(families)).script()
  print(seed, *fuzz_views.run_source(script, f'fuzz_views_{seed}'))
'''


def test_verdicts():
  v = fuzz_views.verdict
  assert v('ok', 'ok') == 'ok'
  assert v('mismatch', 'ok') == v('error', 'unsupported') == 'fixed'
  assert v('dead', 'ok') == 'fixed'
  assert v('ok', 'error') == v('ok', 'unsupported') == 'regression'
  assert v('ok', 'dead') == 'regression'
  assert v('ok', 'error', True) == 'limit'
  assert v('mismatch', 'error', True) == 'both'
  assert v('mismatch', 'mismatch', same=True) == 'both'
  assert v('mismatch', 'mismatch') == 'silent'
  assert v('ok', 'mismatch') == v('error', 'mismatch') == 'silent'
  assert v('mismatch', 'error') == v('dead', 'dead') == 'both'
  assert v('invalid', 'invalid') == 'invalid'
  # PyTorch's own compiler on CPU fails it: no backend can run it.
  assert v('pytorch', 'pytorch') == v('error', 'pytorch') == 'pytorch'
  assert fuzz_views.classify(
      "AssertionError: INVALID program: CPU aot_eager raised "
      "ConstraintViolationError('...')") == 'pytorch'
  assert fuzz_views.classify(
      "AssertionError: INVALID program: CPU eager raised ...") == 'invalid'


def assert_run_under_cpu_eager(count, families=None, script=CPU_ONLY):
  """Programs 0..count-1 (of `families`, default all) each run ok."""
  proc = subprocess.run([sys.executable, '-c', script, TOOLS,
                         str(count)] + ([families] if families else []),
                        capture_output=True,
                        text=True,
                        check=True)
  lines = proc.stdout.splitlines()
  assert len(lines) == count
  assert [l for l in lines if not l.endswith(' ok ')] == []


def test_programs_valid_under_cpu_eager():
  # 400 programs, every family among them: each one runs under CPU eager.
  assert set().union(*(fuzz_views.Program(s).drawn for s in range(400))) == set(
      fuzz_views.FAMILIES)
  assert_run_under_cpu_eager(400)


def test_programs_run_uncompiled_for_the_eager_xla_reference():
  # A `both` program runs again with fn uncompiled and nothing donated: one
  # that eager XLA fails too is `xla`. Uncompiled, CPU eager runs them all.
  assert 'COMPILE = True' in fuzz_views.Program(7).script()
  assert 'COMPILE = False' in fuzz_views.Program(7).script(compile=False)
  assert_run_under_cpu_eager(100,
                             script=CPU_ONLY.replace('.script()',
                                                     '.script(compile=False)'))


def test_loops_programs_valid_under_cpu_eager():
  # loops alone (with index's pad slots): every program a decoder's loop
  # over the layers of a pool, 200 of them, each runs under CPU eager.
  assert all('loops' in fuzz_views.Program(s, ('loops', 'index')).drawn
             for s in range(200))
  assert_run_under_cpu_eager(200, 'loops,index')


@pytest.mark.parametrize('family', ['ops', 'flat'])
def test_op_db_and_flat_parameter_programs_valid_under_cpu_eager(family):
  # ops (op_db's in-place and out= variants on views) and flat (training
  # steps over views of one buffer) alone: 100 programs each, each runs under
  # CPU eager, and its op's result is the same under another random seed.
  assert all(family in fuzz_views.Program(s, (family,)).drawn
             for s in range(100))
  assert_run_under_cpu_eager(100, family)


def test_child_restarts_after_a_failure(tools, monkeypatch):
  # A program's state stays for the next one only if the program was ok.
  for name in ('APPLY_AND_TEST_CACHE', 'PYTHON'):
    monkeypatch.setenv(name, tools.env[name])
  fuzz_views.build_envs()
  child = fuzz_views.Child('stock')
  mark = 'import torch\ndef run():\n  {}'
  try:
    sees = mark.format("assert not hasattr(torch, 'mark'), 'seen'")
    assert child.run(mark.format('torch.mark = 1')) == ('ok', '')
    assert child.run(sees)[1] == 'AssertionError: seen'
    assert child.run(sees) == ('ok', '')  # a new process: no mark
    assert child.run(mark.format('import os; os.abort()'))[0] == 'dead'
    assert child.run(sees) == ('ok', '')
  finally:
    child.close()


@pytest.mark.slow
def test_fuzzer_smoke(tools, tmp_path):
  # Stock and the series on the first 32 programs, which have every family
  # (about 3 minutes on 2 cores): no regression, no silent mismatch, no
  # death on the series, no invalid program.
  out = tmp_path / 'fuzz.json'
  proc = subprocess.run([
      sys.executable, FUZZER, '--count', '32', '--max-reports', '2', '--json',
      str(out)
  ],
                        cwd=REPO_ROOT,
                        env=tools.env,
                        capture_output=True,
                        text=True)
  sys.stdout.write(proc.stdout)
  sys.stderr.write(proc.stderr[-3000:])
  report = json.loads(out.read_text())
  programs, summary = report['programs'], report['summary']
  assert [p['seed'] for p in programs] == list(range(32))
  assert set().union(*(p['families'] for p in programs)) == set(
      fuzz_views.FAMILIES)
  bad = ('regression', 'silent', 'invalid', 'dead series')
  assert {
      k: summary[k] for k in bad
  } == dict.fromkeys(bad, 0), [
      (p['seed'], p['verdict']) for p in programs if p['verdict'] in bad
  ]
  assert proc.returncode == 0
  assert proc.stdout.splitlines()[-1].startswith(
      'fuzz_views: 32 programs (seeds 0..31): ')


def test_fuzzer_reproducer_is_standalone(tools, tmp_path):
  # A printed program runs on its own, with nothing of this project.
  show = subprocess.run([sys.executable, FUZZER, '--show', '7'],
                        capture_output=True,
                        text=True,
                        check=True)
  script = tmp_path / 'seed7.py'
  script.write_text(show.stdout)
  proc = tools.apply('--run', 'python', str(script), cwd=str(tmp_path))
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.strip().endswith('ok')
