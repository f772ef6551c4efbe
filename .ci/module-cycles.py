#!/usr/bin/env python3
"""Fails when a module imports one that imports it back, inside any crate given.

Usage: module-cycles.py crates/*/src

An edge runs from a module to each module whose items it names (`use` paths and `crate::` /
`super::` paths in code, test modules left out), with re-exports followed to the module that
defines the item. Edges between a module and its ancestors are left out: a parent declares
and re-exports its children. Any pair or ring of modules that reach each other is printed,
and the exit code is 1.
"""
import os
import re
import sys

def modules(src):
    mods = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith('.rs'): continue
            p = os.path.join(root, f)
            rel = os.path.relpath(p, src)[:-3].split(os.sep)
            if rel[-1] in ('mod', 'lib', 'main'): rel = rel[:-1]
            mods[tuple(rel)] = p
    return mods

def expand(tree):
    # 'a::{b, c::{d, e}}' -> ['a::b', 'a::c::d', 'a::c::e']
    tree = tree.strip()
    m = re.match(r'^(.*?)\{(.*)\}$', tree, re.S)
    if not m: return [tree]
    prefix, inner = m.group(1), m.group(2)
    parts, depth, cur = [], 0, ''
    for ch in inner:
        if ch == '{': depth += 1
        if ch == '}': depth -= 1
        if ch == ',' and depth == 0: parts.append(cur); cur = ''
        else: cur += ch
    if cur.strip(): parts.append(cur)
    out = []
    for p in parts:
        for e in expand(p.strip()):
            out.append(prefix + e if e != 'self' else prefix.rstrip(':'))
    return out

def strip_tests(text):
    """Drops each item under `#[cfg(test)]`: up to its `;`, or through its braced body."""
    out, pos = [], 0
    while (i := text.find('#[cfg(test)]', pos)) >= 0:
        out.append(text[pos:i])
        j = i + len('#[cfg(test)]')
        while j < len(text) and text[j] not in '{;':
            j += 1
        if j < len(text) and text[j] == '{':
            depth = 0
            while j < len(text):
                depth += {'{': 1, '}': -1}.get(text[j], 0)
                j += 1
                if depth == 0:
                    break
        else:
            j += 1
        pos = j
    out.append(text[pos:])
    return ''.join(out)

def uses(text):
    text = re.sub(r'//[^\n]*', '', strip_tests(text))
    out = []
    for m in re.finditer(r'(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);', text):
        for e in expand(m.group(1)):
            e = re.sub(r'\s+as\s+\w+$', '', e.strip())
            out.append(e)
    out += re.findall(r'\b((?:crate|super)(?:::\w+)+)', text)
    return out

def absolute(path, here):
    parts = path.split('::')
    if parts[0] == 'crate': base, parts = [], parts[1:]
    elif parts[0] in ('super', 'self'):
        base = list(here)
        while parts and parts[0] in ('super', 'self'):
            if parts[0] == 'super': base = base[:-1]
            parts = parts[1:]
    elif here and parts[0] in children.get(here, ()): base = list(here)
    else: return None
    return base + parts

def resolve(parts, depth=0):
    # the deepest module of `parts`, following a re-export of the next name
    mod = ()
    for i, p in enumerate(parts):
        if mod + (p,) in mods: mod = mod + (p,); continue
        if depth < 5:
            for full in reexports.get(mod, {}).get(p, []):
                return resolve(full + parts[i + 1:], depth + 1)
        break
    return mod

def is_ancestor(a, b):
    return len(a) <= len(b) and b[:len(a)] == a

failed = False
for src in sys.argv[1:]:
    mods = modules(src)
    children = {}
    for m in mods:
        if m: children.setdefault(m[:-1], set()).add(m[-1])
    texts = {m: open(p).read() for m, p in mods.items()}
    reexports = {}
    for m, t in texts.items():
        for mm in re.finditer(r'pub(?:\([^)]*\))?\s+use\s+([^;]+);', re.sub(r'//[^\n]*', '', t)):
            for e in expand(mm.group(1)):
                e = e.strip()
                name = re.split(r'\s+as\s+', e)[-1].split('::')[-1]
                full = absolute(re.sub(r'\s+as\s+\w+$', '', e), m)
                if full: reexports.setdefault(m, {}).setdefault(name, []).append(full)
    edges = {}
    for m, t in texts.items():
        for u in uses(t):
            full = absolute(u, m)
            if not full: continue
            target = resolve(full)
            if target == m or is_ancestor(target, m) or is_ancestor(m, target): continue
            edges.setdefault(m, set()).add(target)
    found = False
    for a in edges:
        for b in edges[a]:
            if a in edges.get(b, ()) and a < b:
                print(f"{src}: {'::'.join(a) or 'lib'} <-> {'::'.join(b) or 'lib'}"); found = True
    def sccs():
        index, low, st, on, out, c = {}, {}, [], set(), [], [0]
        def visit(v):
            index[v] = low[v] = c[0]; c[0] += 1; st.append(v); on.add(v)
            for w in edges.get(v, ()):
                if w not in index: visit(w); low[v] = min(low[v], low[w])
                elif w in on: low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = st.pop(); on.discard(w); comp.append(w)
                    if w == v: break
                out.append(comp)
        for v in list(edges): 
            if v not in index: visit(v)
        return out
    for comp in sccs():
        if len(comp) > 2:
            print(f"{src}: cycle among " + ', '.join('::'.join(x) for x in comp)); found = True
    if found:
        failed = True
    else:
        print(f"{src}: no cycles")
sys.exit(1 if failed else 0)
