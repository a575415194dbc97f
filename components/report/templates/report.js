// Unpack plotly (run as an inline script, as a page normally loads it), draw every figure, then make
// the print images off-screen; the page says how far it got and sets data-ready (figures drawn) and
// data-print-ready (print images made) on <body>.
(async function(){
  const say=(t)=>{const p=document.getElementById('progress');if(p)p.textContent=t;};
  say('Unpacking the plotting library…');
  const b=atob(document.getElementById('plotly-gz').textContent.trim());
  const bytes=new Uint8Array(b.length);for(let i=0;i<b.length;i++)bytes[i]=b.charCodeAt(i);
  const src=await new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'))).text();
  const tag=document.createElement('script');tag.textContent=src;document.head.appendChild(tag);
  const dark=()=>document.documentElement.classList.contains('dark')||(!document.documentElement.classList.contains('light')
    &&window.matchMedia&&window.matchMedia('(prefers-color-scheme: dark)').matches);
  const colours=(d)=>({paper_bgcolor:d?'#1f2937':'#f9fafb',plot_bgcolor:d?'#111827':'#ffffff',
    font:{color:d?'#e5e7eb':'#1f2937'}});
  const divs=[...document.querySelectorAll('.plot[data-fig]')];
  const figs={};
  let done=0;
  for(const div of divs){  // first every figure, interactive
    const n=div.dataset.fig;
    try{
      const fig=JSON.parse(document.getElementById('figjson'+n).textContent);
      const layout=Object.assign({},fig.layout||{});delete layout.width;layout.autosize=true;
      figs[n]={data:fig.data||[],layout:layout};
      const c=colours(dark());
      await Plotly.newPlot(div,fig.data||[],Object.assign({},layout,c,{font:Object.assign({},layout.font||{},c.font)}),
                           {responsive:true,displaylogo:false});
      div.dataset.rendered='1';
    }catch(e){div.dataset.error=String(e);div.textContent='This figure could not be drawn: '+e;}
    done++;say('Drawing figures… '+done+' of '+divs.length);
  }
  window.wbRecolour=()=>{for(const div of divs){if(div.dataset.rendered){const c=colours(dark());
    Plotly.relayout(div,{paper_bgcolor:c.paper_bgcolor,plot_bgcolor:c.plot_bgcolor,'font.color':c.font.color});}}};
  if(window.matchMedia)window.matchMedia('(prefers-color-scheme: dark)').addEventListener('change',window.wbRecolour);
  document.body.dataset.ready='1';
  say(divs.length+' interactive figures: hover for values, drag to zoom. Preparing them for printing…');
  done=0;
  for(const div of divs){  // then a light picture of each for print (drawn off-screen)
    const n=div.dataset.fig;
    if(!figs[n])continue;
    try{
      const w=Math.max(div.clientWidth||800,600),h=Math.max(div.clientHeight||400,300);
      const c=colours(false);
      const layout=Object.assign({},figs[n].layout,c,{font:Object.assign({},figs[n].layout.font||{},c.font)});
      document.getElementById('figimg'+n).src=await Plotly.toImage({data:figs[n].data,layout:layout},
                                                                     {format:'png',width:w,height:h});
    }catch(e){div.dataset.printError=String(e);}
    done++;
  }
  say(divs.length+' interactive figures: hover for values, drag to zoom; printing shows them as images.');
  document.body.dataset.printReady='1';
})();
