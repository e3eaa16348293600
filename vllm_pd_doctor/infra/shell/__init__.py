"""A symbolic shell: read a script as bash would, run it without executing anything.

words (tokens as written, heredocs, `$(...)`/`${...}` spans), expand (parameter, arithmetic and
command-substitution expansion against a `Scope`), syntax (the command tree: simple commands,
`&&`/`||`, if/for/while/case, functions, groups), builtins (echo/printf/seq output, `test`
conditions, the commands that start nothing), interp (the symbolic run: variables, exports,
functions, loops, `eval`, `set --`; every other command goes to `Interp.external`).
No knowledge of vLLM: check-config's `parse.symbolic` subclasses `Interp` to find servers.
"""
