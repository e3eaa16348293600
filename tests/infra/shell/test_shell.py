"""The symbolic shell (`vllm_pd_doctor.infra.shell`) on its own: tokenizer, expansion, command tree, and
the symbolic run (variables, functions, loops, eval, `set --`, heredocs), with no vLLM in sight."""

from __future__ import annotations

import pytest

from vllm_pd_doctor.infra.shell.builtins import output
from vllm_pd_doctor.infra.shell.builtins import test as condition
from vllm_pd_doctor.infra.shell.expand import Scope, arith, expand
from vllm_pd_doctor.infra.shell.interp import MAX_ITER, Interp, LimitReached
from vllm_pd_doctor.infra.shell.syntax import AndOr, Case, For, Func, If, Simple, While, parse_script
from vllm_pd_doctor.infra.shell.words import ShellSyntaxError, tokenize, unresolved_names


def _words(text: str) -> list[str]:
    return [t.text for t in tokenize(text) if t.kind == "w"]


def _ran(text: str, variables: dict[str, str] | None = None) -> list[list[str]]:
    it = Interp(variables or {})
    it.run_text(text)
    return it.ran


# --- tokenizer ---------------------------------------------------------------------------------


def test_words_keep_their_quotes_and_json_survives():
    assert _words("""vllm serve m --kv-transfer-config '{"kv_role": "kv_both"}'""") == [
        "vllm",
        "serve",
        "m",
        "--kv-transfer-config",
        """'{"kv_role": "kv_both"}'""",
    ]
    assert _words('echo "a $(date +%s) b" ${X:-y}') == ["echo", '"a $(date +%s) b"', "${X:-y}"]


def test_operators_comments_and_continuations():
    toks = tokenize("a && b || c | d # note\ne \\\n  f 2>&1 > log")
    assert [t.text for t in toks if t.kind == "op"] == ["&&", "||", "|", ">&", ">"]
    assert [t.text for t in toks if t.kind == "w"] == ["a", "b", "c", "d", "e", "f", "log"]
    assert sum(t.kind == "nl" for t in toks) == 1


def test_heredoc_body_is_one_token_not_commands():
    toks = tokenize("cat > f.yaml <<'EOF'\nvllm serve inside\nEOF\necho after")
    assert [t.text for t in toks if t.kind == "w"] == ["cat", "f.yaml", "echo", "after"]
    assert [t.text for t in toks if t.kind == "hd"] == ["'vllm serve inside\n"]  # quoted: no expansion
    (n, _) = parse_script("cat <<-EOF | run -f -\n\tkind: X\nEOF\necho after")
    assert isinstance(n, AndOr) and isinstance(n.parts[0], Simple)
    assert n.parts[0].heredoc == '"kind: X\n'  # <<- strips the leading tabs


def test_unclosed_quote_is_located():
    with pytest.raises(ShellSyntaxError, match="line 2, column 6"):
        tokenize("ok\necho 'open")


# --- expansion ---------------------------------------------------------------------------------


def test_expansion_splits_unquoted_only():
    sc = Scope(vars={"A": "x y"})
    assert expand("$A", sc) == ["x", "y"]
    assert expand('"$A"', sc) == ["x y"]
    assert expand("'$A'", sc) == ["$A"]


def test_parameter_forms_and_arithmetic():
    sc = Scope(vars={"P": "8000", "PATHV": "/a/b/c.sh"}, arrays={"ARR": ["1", "2", "3"]})
    assert expand("${B:-dflt}", sc) == ["dflt"]
    assert expand("${P:+set}", sc) == ["set"]
    assert expand("${PATHV##*/}", sc) == ["c.sh"]
    assert expand("$((P + 1))", sc) == ["8001"]
    assert expand('"${ARR[@]}"', sc) == ["1", "2", "3"]
    assert expand("${#ARR[@]}", sc) == ["3"]
    assert arith("2 * (3 + 4)", sc) == 14


def test_what_the_file_cannot_tell_stays_as_written():
    sc = Scope()
    assert expand("--port=${PORT}", sc) == ["--port=${PORT}"]
    assert expand('"$(hostname -i)"', sc) == ["$(hostname -i)"]
    assert sc.unresolved == {"PORT", "$(hostname -i)"}
    assert unresolved_names("${PORT}:$(hostname -i)") == ["PORT", "$(hostname -i)"]


def test_command_substitution_goes_through_the_hook():
    sc = Scope(command_subst=lambda text: "out\n" if text == "cmd" else None)
    assert expand('"$(cmd)"', sc) == ["out"]


# --- command tree ------------------------------------------------------------------------------


def test_command_tree():
    nodes = parse_script(
        'if [ -n "$A" ]; then x; else y; fi\n'
        "for i in 1 2; do run $i; done\n"
        "f() { echo hi; }\n"
        "case $M in a*) z;; esac\n"
        "while true; do q; done\n"
        "a && b | c\n"
    )
    assert [type(n) for n in nodes] == [If, For, Func, Case, While, AndOr]
    loop = nodes[1]
    assert isinstance(loop, For) and loop.var == "i" and loop.words == ["1", "2"]
    assert isinstance(loop.body[0], Simple) and loop.body[0].words == ["run", "$i"]


def test_redirections_are_not_words():
    (n,) = parse_script("run --a 1 > out.log 2>&1 &")
    assert isinstance(n, Simple) and n.words == ["run", "--a", "1"] and n.bg


# --- builtins ----------------------------------------------------------------------------------


def test_builtin_output_and_conditions():
    assert output(["printf", "%s-%d\\n", "a", "3"]) == "a-3\n"
    assert output(["seq", "2"]) == "1\n2\n"
    assert condition(["[", "a", "==", "a*", "]"]) is True
    assert condition(["[[", "-z", "", "]]"]) is True
    assert condition(["[", "${X}", "=", "1", "]"]) is None  # cannot be known: neither branch is ruled out


# --- symbolic run ------------------------------------------------------------------------------


def test_variables_exports_and_prefix_assignments():
    it = Interp({})
    it.run_text("export A=1\nB=2\nC=3 run $A $B\n")
    assert it.ran == [["run", "1", "2"]]
    assert it.exported_env() == {"A": "1"}


def test_functions_get_their_own_positionals():
    assert _ran('start() { run --port "$1" --role "$2"; }\nstart 8100 p\nstart 8200 d\n') == [
        ["run", "--port", "8100", "--role", "p"],
        ["run", "--port", "8200", "--role", "d"],
    ]


def test_for_loops_are_bounded():
    assert _ran("for i in $(seq 3); do run $i; done") == [["run", "1"], ["run", "2"], ["run", "3"]]
    many = " ".join(str(k) for k in range(MAX_ITER + 5))
    assert len(_ran(f"for i in {many}; do run $i; done")) == MAX_ITER


def test_if_takes_the_branch_it_can_decide():
    assert _ran('M=b\nif [ "$M" = a ]; then run a; else run b; fi') == [["run", "b"]]
    assert _ran('if [ "$UNKNOWN" = a ]; then run a; else run b; fi') == [["run", "a"]]


def test_eval_and_set_dashdash():
    assert _ran('CMD="run --x 1"\neval "$CMD --y 2"') == [["run", "--x", "1", "--y", "2"]]
    assert _ran('set -- --tp "5" model\nrun "$@"') == [["run", "--tp", "5", "model"]]


def test_while_argument_parsing_shifts():
    text = (
        "set -- --port 9 --m x\n"
        "while [[ $# -gt 0 ]]; do case $1 in --port) P=$2; shift 2;; *) shift;; esac; done\n"
        "run $P"
    )
    assert _ran(text) == [["run", "9"]]


def test_given_variables_win_over_assignments():
    it = Interp({"PORT": "1"}, pinned={"PORT"})
    it.run_text("PORT=2\nrun $PORT")
    assert it.ran == [["run", "1"]]


def test_uncalled_functions_only_on_request():
    it = Interp({})
    it.run_text("f() { run inside; }")
    assert it.ran == []
    it.run_uncalled()
    assert it.ran == [["run", "inside"]]


def test_heredocs_write_files_and_feed_pipes():
    it = Interp({"V": "1.3"})
    it.run_text(
        "cat <<EOF > a.yaml\nimage: rt:$V\nEOF\n"
        "tee b.yaml <<'EOF' | run -f -\nlit: $V\nEOF\n"
        "echo more >> a.yaml\n"
    )
    assert it.files == {"a.yaml": "image: rt:1.3\nmore\n", "b.yaml": "lit: $V\n"}
    assert it.ran == [["run", "-f", "-"]]


def test_external_commands_get_their_stdin():
    seen: list[str | None] = []

    class Spy(Interp):
        def external(self, argv: list[str], prefix: dict[str, str], raw: str) -> bool | None:
            seen.append(self.stdin)
            return None

    Spy({}).run_text("cat <<EOF | kubectl apply -f -\nkind: Pod\nEOF\nrun2 <<< x")
    assert seen == ["kind: Pod\n", None]


def test_bounds_are_reported():
    with pytest.raises(LimitReached):
        _ran("A=xxxxxxxxxxxxxxxx\n" + "A=$A$A\n" * 20)
