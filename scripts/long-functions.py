#!/usr/bin/env python3
"""Functions over 80 lines in engine/ and gui/ (issue 56), by a brace heuristic: a line at depth <= 2
that opens a brace and holds a "(" (not a namespace, class, struct, enum or extern) starts one; its
closing brace ends it. Prints the count, then (lines, file, first line, head) for each. Run from the
repository root."""
import re,sys,os
res=[]
for root in ['engine','gui']:
  for dp,dn,fn in os.walk(root):
    for f in fn:
      if not f.endswith(('.cpp','.h')): continue
      p=os.path.join(dp,f); lines=open(p,errors='replace').read().split('\n')
      depth=0; start=None; name=None
      for i,l in enumerate(lines):
        s=re.sub(r'"(\\.|[^"\\])*"','""',l); s=re.sub(r"'(\\.|[^'\\])*'","''",s); s=s.split('//')[0]
        # function start heuristic: line at depth 0 (or 1 inside namespace/class) ending with '{' and containing '('
        for ch in s:
          if ch=='{':
            if start is None and '(' in s and not re.match(r'\s*(namespace|class|struct|enum|extern)\b',s) and depth<=2:
              start=i; name=s.strip()[:70]; sd=depth
            depth+=1
          elif ch=='}':
            depth-=1
            if start is not None and depth==sd:
              if i-start+1>80: res.append((i-start+1,p,start+1,name))
              start=None
print(len(res))
for r in sorted(res,reverse=True): print(r)
