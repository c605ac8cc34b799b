#!/usr/bin/env python3
"""Fails when the files of src/ import each other in a circle.

Reads every `crate::` and `super::` path outside comments and test modules,
maps it to the module file it names (the longest prefix that is one), and
looks for a cycle in that graph. Run from the repository root; .ci/run does.
"""
import re,os,collections,sys
files={}
for root,_,fs in os.walk('src'):
    for f in fs:
        if f.endswith('.rs'): files[os.path.join(root,f)]=open(os.path.join(root,f)).read()
def modpath(path):
    p=path[4:-3].split('/')
    if p[-1]=='mod': p=p[:-1]
    if p in (['lib'],['main']): return []
    return p
mods={tuple(modpath(f)):f for f in files}
def resolve(parts):
    for i in range(len(parts),0,-1):
        if tuple(parts[:i]) in mods: return tuple(parts[:i])
    return None
g=collections.defaultdict(set)
for f,src in files.items():
    me=tuple(modpath(f))
    src=src.split('#[cfg(test)]\nmod tests')[0]
    src='\n'.join(l for l in src.split('\n') if not l.strip().startswith('//'))
    parent=list(me[:-1])
    for m in re.finditer(r'\b(crate|super)::([A-Za-z_][\w:]*(?:::\{[^;]*\})?)', src):
        base, rest = m.group(1), m.group(2)
        prefix=[] if base=='crate' else parent
        items=[rest]
        mm=re.match(r'^([\w:]*)::\{(.*)\}$', rest, re.S)
        if mm: items=[mm.group(1)+'::'+x.strip() for x in mm.group(2).split(',') if x.strip()]
        for item in items:
            parts=prefix+[x for x in re.split(r'::', item) if x and x!='self']
            t=resolve(parts)
            if t is not None and t!=me: g[me].add(t)
color={};cycles=[]
def dfs(u,stack):
    color[u]=1; stack.append(u)
    for v in sorted(g[u]):
        if color.get(v)==1: cycles.append(stack[stack.index(v):]+[v])
        elif not color.get(v): dfs(v,stack)
    stack.pop(); color[u]=2
for u in sorted(mods):
    if not color.get(u): dfs(u,[])
for c in cycles:
    print('import cycle: ' + ' -> '.join('/'.join(x) or 'lib' for x in c), file=sys.stderr)
print(f'{len(mods)} modules, {sum(len(v) for v in g.values())} imports, {len(cycles)} cycles')
sys.exit(1 if cycles else 0)
