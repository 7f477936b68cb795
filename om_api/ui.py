# ruff: noqa: E501  (the page is one embedded HTML/JS document; its lines are not Python)
"""``GET /ui``: one self-contained page (no build step, no external assets).

``/ui#<thread id>`` opens that thread directly. It talks to the same API as any client: it asks for a key (kept in the browser's localStorage; leave it
empty when auth is disabled), lists threads, shows token bars for both windows, the observation log by
generation, buffered work, and the live ``data-om-*`` parts (read with fetch streaming, since EventSource
cannot send an Authorization header).
"""

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>om — Observational Memory</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px system-ui,sans-serif;margin:0;display:grid;grid-template-columns:260px 1fr;height:100vh}
aside{border-right:1px solid #ddd;overflow:auto;padding:8px;background:#fafafa}
main{overflow:auto;padding:12px 18px}
h1{font-size:16px;margin:4px 0 8px} h2{font-size:14px;margin:16px 0 6px}
.thread{padding:4px 6px;cursor:pointer;border-radius:4px;word-break:break-all}
.thread:hover,.thread.sel{background:#e4ecff}
.bar{height:16px;background:#eee;border-radius:3px;position:relative;margin:2px 0 8px;max-width:640px}
.bar>div{height:100%;background:#4a7;border-radius:3px}.bar>div.over{background:#d93}
.bar>span{position:absolute;left:6px;top:0;font-size:11px;line-height:16px}
pre{white-space:pre-wrap;background:#f6f6f6;padding:8px;border-radius:4px;margin:4px 0;font-size:12px}
#events{font:12px ui-monospace,monospace;max-height:300px;overflow:auto;background:#111;color:#cfc;padding:6px}
input{width:100%;box-sizing:border-box;margin-bottom:6px}
</style></head><body>
<aside><h1>om</h1>
<input id="key" placeholder="API key (blank if auth disabled)">
<button id="reload">Load threads</button>
<div id="threads"></div></aside>
<main><h1 id="title">Select a thread</h1>
<h2>Messages window</h2><div id="mbar" class="bar"><div></div><span></span></div>
<h2>Observations window</h2><div id="obar" class="bar"><div></div><span></span></div>
<h2>Buffered work</h2><div id="buffered"></div>
<h2>Observation log (generation <span id="gen">0</span>)</h2><div id="log"></div>
<h2>Live events</h2><div id="events"></div>
</main>
<script>
const $=id=>document.getElementById(id);
$('key').value=localStorage.getItem('omKey')||'';
function headers(){const k=$('key').value.trim();localStorage.setItem('omKey',k);return k?{Authorization:'Bearer '+k}:{};}
async function api(path){const r=await fetch(path,{headers:headers()});if(!r.ok)throw new Error((await r.json()).error.message);return r.json();}
function esc(s){return String(s??'').replace(/[&<>]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;'}[c]));}
function bar(el,tokens,threshold){const pct=Math.min(100,threshold?tokens/threshold*100:0);
 el.firstElementChild.style.width=pct+'%';el.firstElementChild.className=tokens>=threshold?'over':'';
 el.lastElementChild.textContent=tokens.toLocaleString()+' / '+threshold.toLocaleString()+' tokens';}
let current=null,controller=null;
async function loadThreads(){try{const d=await api('/v1/threads');$('threads').innerHTML='';
 for(const t of d.threads){const e=document.createElement('div');e.className='thread';e.textContent=(t.title||t.thread_id);
  e.title=t.thread_id;e.onclick=()=>select(t.thread_id,e);$('threads').appendChild(e);
  if(location.hash.slice(1)===t.thread_id)select(t.thread_id,e);}}catch(err){$('threads').textContent=err.message;}}
function showStatus(s){bar($('mbar'),s.windows.active.messages.tokens,s.windows.active.messages.threshold);
 bar($('obar'),s.windows.active.observations.tokens,s.windows.active.observations.threshold);}
async function refresh(){if(!current)return;const id=encodeURIComponent(current);
 const [s,o]=await Promise.all([api('/v1/threads/'+id+'/status'),api('/v1/threads/'+id+'/observations')]);
 showStatus(s);$('gen').textContent=o.generation;
 $('log').innerHTML=o.log.map(g=>'<pre title="'+esc(g.kind)+'">'+esc(g.text)+'</pre>').join('')||'<i>empty</i>';
 const b=s.windows.buffered;$('buffered').innerHTML='chunks: '+b.observations.chunks+' ('+b.observations.messageTokens+
  ' message tokens → '+b.observations.observationTokens+' observation tokens, '+b.observations.status+
  ')<br>reflection: '+b.reflection.status+' ('+b.reflection.inputObservationTokens+' → '+b.reflection.observationTokens+')'+
  o.buffered_chunks.map(c=>'<pre>'+esc(c.observations)+'</pre>').join('');}
async function live(){if(controller)controller.abort();controller=new AbortController();
 const r=await fetch('/v1/threads/'+encodeURIComponent(current)+'/stream',{headers:headers(),signal:controller.signal});
 const reader=r.body.getReader();const dec=new TextDecoder();let buf='';
 while(true){const {value,done}=await reader.read();if(done)break;buf+=dec.decode(value,{stream:true});
  let i;while((i=buf.indexOf('\\n\\n'))>=0){const block=buf.slice(0,i);buf=buf.slice(i+2);
   for(const line of block.split('\\n')){if(!line.startsWith('data: '))continue;const part=JSON.parse(line.slice(6));
    if(part.type==='data-om-status'){showStatus(part.data);continue;}
    const row=document.createElement('div');row.textContent=new Date().toLocaleTimeString()+' '+part.type+' '+
     JSON.stringify(part.data).slice(0,240);$('events').prepend(row);refresh();}}}}
function select(id,el){current=id;document.querySelectorAll('.thread').forEach(e=>e.classList.remove('sel'));
 el.classList.add('sel');$('title').textContent=id;$('events').innerHTML='';refresh();live().catch(()=>{});}
$('reload').onclick=loadThreads;loadThreads();
</script></body></html>
"""
