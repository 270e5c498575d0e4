#!/usr/bin/env python3
"""Rewrites CUDA kernel launches for the CPU stand-in (tools/cuda_emu):
    kernel<T><<<grid, block, smem, stream>>>(args...)  ->  ::emu::Launcher(grid, block, smem, stream).Run(&kernel<T>, args...)
Usage: cu2cc.py IN.cu OUT.cc"""
import sys


def callee_start(s, end):
    """Start of the kernel expression ending just before `end` (an identifier, optionally with <...>)."""
    i = end
    if s[i - 1] == '>':
        depth = 0
        while True:
            i -= 1
            if s[i] == '>':
                depth += 1
            elif s[i] == '<':
                depth -= 1
                if depth == 0:
                    break
    while i > 0 and (s[i - 1].isalnum() or s[i - 1] in '_:'):
        i -= 1
    return i


def matching_paren(s, i):
    depth = 0
    while True:
        if s[i] == '(':
            depth += 1
        elif s[i] == ')':
            depth -= 1
            if depth == 0:
                return i
        i += 1


def rewrite(s):
    out = []
    pos = 0
    while True:
        k = s.find('<<<', pos)
        if k < 0:
            out.append(s[pos:])
            return ''.join(out)
        start = callee_start(s, k)
        close = s.find('>>>', k)
        conf = s[k + 3:close]
        p = close + 3
        while s[p].isspace():
            p += 1
        assert s[p] == '(', s[k - 40:p + 10]
        q = matching_paren(s, p)
        args = s[p + 1:q]
        out.append(s[pos:start])
        out.append('::emu::Launcher(%s).Run(&%s, %s)' % (conf, s[start:k], args))
        pos = q + 1


if __name__ == '__main__':
    src = open(sys.argv[1]).read()
    with open(sys.argv[2], 'w') as f:
        f.write('#line 1 "%s"\n' % sys.argv[1])
        f.write(rewrite(src))
