# ruff: noqa: E501  (the page is one embedded HTML/JS document; its lines are not Python)
"""``GET /ui``: one self-contained page (no build step, no external assets).

``/ui#<thread id>`` opens that thread directly. It talks to the same API as any client. The API key is typed
into a password field and kept in the tab's sessionStorage only (leave it empty when auth is disabled); it
is sent as ``Authorization: Bearer``, also on the live stream, which is read with fetch streaming since
EventSource cannot send that header. For the chosen thread (its title as the heading) it shows the models
each role may call and the thresholds, token bars for both windows (empty until a thread is chosen), work
in flight with its elapsed time, buffered work, the usage and cost of every cycle (the stream replayed
from its first event), the observation log of the current or an earlier generation, and the live
``data-om-*`` parts.
"""

PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>om — Observational Memory</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px system-ui,sans-serif;margin:0;display:grid;grid-template-columns:260px 1fr;height:100vh}
aside{border-right:1px solid #ddd;overflow:auto;padding:8px;background:#fafafa}
main{overflow:auto;padding:12px 18px}
h1{font-size:16px;margin:4px 0 8px} h2{font-size:14px;margin:16px 0 6px}
.muted{color:#777;font-size:12px}
.thread{padding:4px 6px;cursor:pointer;border-radius:4px;word-break:break-all}
.thread:hover,.thread.sel{background:#e4ecff}
.bar{height:16px;background:#eee;border-radius:3px;position:relative;margin:2px 0 8px;max-width:640px}
.bar>div{height:100%;width:0;background:#4a7;border-radius:3px}.bar>div.over{background:#d93}
.bar>span{position:absolute;left:6px;top:0;font-size:11px;line-height:16px}
pre{white-space:pre-wrap;background:#f6f6f6;padding:8px;border-radius:4px;margin:4px 0;font-size:12px}
table{border-collapse:collapse;font-size:12px}td,th{border-bottom:1px solid #eee;padding:2px 8px;text-align:right;white-space:nowrap}
td:nth-child(-n+3),th:nth-child(-n+3){text-align:left}tfoot td{font-weight:600}tr.failed td{color:#b33}
#events{font:12px ui-monospace,monospace;max-height:300px;overflow:auto;background:#111;color:#cfc;padding:6px}
label{font-size:12px} input{width:100%;box-sizing:border-box;margin-bottom:6px}
</style></head><body>
<aside><h1>om</h1>
<form id="keyform"><label for="key">API key</label>
<input id="key" type="password" autocomplete="off" placeholder="blank if auth is disabled">
<button id="reload" type="submit">Load threads</button></form>
<p class="muted">The key is sent as <code>Authorization: Bearer</code> and kept for this tab only (sessionStorage).</p>
<div id="threads"></div></aside>
<main><h1 id="title">Select a thread</h1><div id="tid" class="muted"></div>
<h2>Model and thresholds</h2><div id="meta" class="muted">—</div>
<h2>Messages window</h2><div id="mbar" class="bar"><div style="width:0%"></div><span></span></div>
<h2>Observations window</h2><div id="obar" class="bar"><div style="width:0%"></div><span></span></div>
<h2>Work in flight</h2><div id="inflight"><i>none</i></div>
<h2>Buffered work</h2><div id="buffered"></div>
<h2>Usage per cycle</h2>
<table id="usage"><thead><tr><th>cycle</th><th>part</th><th>model</th><th>input</th><th>output</th><th>total</th><th>cost (USD)</th><th>latency</th><th>attempts</th></tr></thead>
<tbody></tbody><tfoot></tfoot></table>
<h2>Observation log, generation <select id="gen"></select></h2><div id="log"></div>
<h2>Live events</h2><div id="events"></div>
</main>
<script>
const $=id=>document.getElementById(id);
// the key lives only as long as the tab; earlier versions of this page kept it in localStorage
localStorage.removeItem('omKey');
$('key').value=sessionStorage.getItem('omKey')||'';
function headers(){const k=$('key').value.trim();return k?{Authorization:'Bearer '+k}:{};}
async function api(path){const r=await fetch(path,{headers:headers()});if(!r.ok)throw new Error((await r.json()).error.message);return r.json();}
function esc(s){return String(s??'').replace(/[&<>"]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]));}
const num=n=>Number(n||0).toLocaleString();
const usd=c=>c==null?'—':'$'+Number(c).toFixed(6);
function bar(el,tokens,threshold){const pct=Math.min(100,threshold?tokens/threshold*100:0);
 el.firstElementChild.style.width=pct+'%';el.firstElementChild.className=tokens>=threshold?'over':'';
 el.lastElementChild.textContent=num(tokens)+' / '+num(threshold)+' tokens';}
function emptyBars(){for(const el of [$('mbar'),$('obar')]){el.firstElementChild.style.width='0%';el.firstElementChild.className='';el.lastElementChild.textContent='';}}
let current=null,controller=null,thread=null,status=null,shownGen=null,timer=null;
const usage=new Map();
async function loadThreads(){$('threads').textContent='';try{const d=await api('/v1/threads');
 for(const t of d.threads){const e=document.createElement('div');e.className='thread';e.textContent=(t.title||t.thread_id);
  e.title=t.thread_id;e.dataset.id=t.thread_id;e.onclick=()=>select(t.thread_id,e);$('threads').appendChild(e);
  if(location.hash.slice(1)===t.thread_id)select(t.thread_id,e);}
 if(!d.threads.length)$('threads').innerHTML='<i>no threads</i>';}catch(err){$('threads').textContent=err.message;}}
function showMeta(){if(!thread||!status)return;const w=status.windows.active,m=thread.models||{};
 const ob=status.overBudget;
 $('meta').innerHTML='observer: <b>'+esc((m.observer||[]).join(', '))+'</b> · reflector: <b>'+esc((m.reflector||[]).join(', '))+
  '</b><br>observe at <b id="mthreshold">'+num(w.messages.threshold)+'</b> message tokens · reflect at <b id="othreshold">'+
  num(w.observations.threshold)+'</b> observation tokens · generation '+status.generationCount+
  '<br>over budget: '+(ob?esc(ob.reason)+' ('+num(ob.pendingTokens)+' / '+num(ob.limitTokens)+' tokens)':'no');}
function showStatus(s){status=s;bar($('mbar'),s.windows.active.messages.tokens,s.windows.active.messages.threshold);
 bar($('obar'),s.windows.active.observations.tokens,s.windows.active.observations.threshold);showMeta();}
function showInFlight(f){const rows=[];
 if(f.buffer)rows.push(['buffered observation ('+(f.buffer.started?'running':'queued')+')',f.buffer.cycle_id,f.buffer.requested_at,f.buffer.message_tokens+' message tokens']);
 if(f.sync_observation)rows.push(['synchronous observation',f.sync_observation.cycle_id,f.sync_observation.started_at,f.sync_observation.message_tokens+' message tokens']);
 if(f.reflection)rows.push([f.reflection.mode+' reflection',f.reflection.cycle_id,f.reflection.requested_at,f.reflection.input_tokens+' observation tokens']);
 $('inflight').innerHTML=rows.map(([what,id,since,size])=>'<div class="flight" data-since="'+esc(since)+'">'+esc(what)+' <code>'+esc(id)+
  '</code>, '+esc(size)+', for <b class="elapsed"></b> (since '+esc(new Date(since).toLocaleTimeString())+')</div>').join('')||'<i>none</i>';tick();}
function tick(){for(const el of document.querySelectorAll('.flight')){const ms=Math.max(0,Date.now()-Date.parse(el.dataset.since));
 el.querySelector('.elapsed').textContent=(ms/1000).toFixed(1)+' s';}}
setInterval(tick,250);
function showGenerations(o){const sel=$('gen'),want=shownGen??o.generation;sel.innerHTML=o.generations.map(g=>
 '<option value="'+g.generation+'">'+g.generation+(g.generation===o.generation?' (current)':'')+'</option>').join('');sel.value=String(want);}
function showLog(o){$('log').innerHTML=o.log.map(g=>'<pre title="'+esc(g.kind)+'">'+esc(g.text)+'</pre>').join('')||'<i>empty</i>';}
async function refresh(){if(!current)return;const id=encodeURIComponent(current);
 const [s,o]=await Promise.all([api('/v1/threads/'+id+'/status'),api('/v1/threads/'+id+'/observations')]);
 showStatus(s);showGenerations(o);showInFlight(o.in_flight);if(shownGen===null)showLog(o);
 const b=s.windows.buffered;$('buffered').innerHTML='chunks: '+b.observations.chunks+' ('+b.observations.messageTokens+
  ' message tokens → '+b.observations.observationTokens+' observation tokens, '+b.observations.status+
  ')<br>reflection: '+b.reflection.status+' ('+b.reflection.inputObservationTokens+' → '+b.reflection.observationTokens+')'+
  o.buffered_chunks.map(c=>'<pre>'+esc(c.observations)+'</pre>').join('');}
function later(){clearTimeout(timer);timer=setTimeout(()=>refresh().catch(()=>{}),150);}
async function pickGeneration(){const n=Number($('gen').value),o=await api('/v1/threads/'+encodeURIComponent(current)+'/observations');
 shownGen=n===o.generation?null:n;showLog(shownGen===null?o:await api('/v1/threads/'+encodeURIComponent(current)+'/observations?generation='+n));}
$('gen').onchange=()=>pickGeneration().catch(err=>{$('log').textContent=err.message;});
function addUsage(part){const d=part.data;if(!('usage' in d))return;usage.set(d.cycleId,part);
 const rows=[...usage.values()];let t={i:0,o:0,n:0,c:0,priced:false,l:0,a:0};
 $('usage').tBodies[0].innerHTML=rows.map(({type,data})=>{const u=data.usage;
  if(u){t.i+=u.inputTokens;t.o+=u.outputTokens;t.n+=u.totalTokens;t.l+=u.latencyMs;t.a+=u.attempts;if(u.costUsd!=null){t.c+=u.costUsd;t.priced=true;}}
  const kind=type.replace('data-om-','')+' ('+data.operationType+')'+(data.discarded?', discarded':'');
  return '<tr class="cycle'+(type.endsWith('-failed')?' failed':'')+'" data-cycle="'+esc(data.cycleId)+'"><td><code>'+esc(data.cycleId)+'</code></td><td>'+esc(kind)+
   '</td>'+(u?'<td>'+esc(u.model||'—')+'</td><td>'+num(u.inputTokens)+'</td><td>'+num(u.outputTokens)+'</td><td>'+num(u.totalTokens)+
   '</td><td>'+usd(u.costUsd)+'</td><td>'+num(Math.round(u.latencyMs))+' ms</td><td>'+u.attempts+'</td>':'<td colspan="7">no usage recorded</td>')+'</tr>';}).join('');
 $('usage').tFoot.innerHTML='<tr><td>'+rows.length+' cycles</td><td></td><td></td><td>'+num(t.i)+'</td><td>'+num(t.o)+'</td><td id="totaltokens">'+num(t.n)+
  '</td><td id="totalcost">'+(t.priced?usd(t.c):'—')+'</td><td>'+num(Math.round(t.l))+' ms</td><td>'+t.a+'</td></tr>';}
async function live(){if(controller)controller.abort();controller=new AbortController();
 // from the first event: the replay fills the usage table with every cycle the thread has had
 const r=await fetch('/v1/threads/'+encodeURIComponent(current)+'/stream',{headers:{...headers(),'Last-Event-ID':'0'},signal:controller.signal});
 const reader=r.body.getReader();const dec=new TextDecoder();let buf='';
 while(true){const {value,done}=await reader.read();if(done)break;buf+=dec.decode(value,{stream:true});
  let i;while((i=buf.indexOf('\n\n'))>=0){const block=buf.slice(0,i);buf=buf.slice(i+2);
   for(const line of block.split('\n')){if(!line.startsWith('data: '))continue;const part=JSON.parse(line.slice(6));
    if(part.type==='data-om-status'){showStatus(part.data);continue;}
    if(part.type==='data-om-thread-update'&&thread){thread.title=part.data.newTitle;showTitle();}
    addUsage(part);
    const row=document.createElement('div');row.textContent=new Date().toLocaleTimeString()+' '+part.type+' '+
     JSON.stringify(part.data).slice(0,240);$('events').prepend(row);later();}}}}
function showTitle(){$('title').textContent=thread.title||thread.thread_id;$('tid').textContent=thread.thread_id;}
async function select(id,el){current=id;thread=null;status=null;shownGen=null;usage.clear();
 document.querySelectorAll('.thread').forEach(e=>e.classList.remove('sel'));el.classList.add('sel');
 $('events').innerHTML='';$('usage').tBodies[0].innerHTML='';$('usage').tFoot.innerHTML='';emptyBars();
 $('title').textContent=id;$('tid').textContent='';
 try{thread=await api('/v1/threads/'+encodeURIComponent(id));if(current!==id)return;showTitle();await refresh();}
 catch(err){$('meta').textContent=err.message;}
 live().catch(()=>{});}
$('keyform').onsubmit=ev=>{ev.preventDefault();sessionStorage.setItem('omKey',$('key').value.trim());loadThreads();};
loadThreads();
</script></body></html>
"""
