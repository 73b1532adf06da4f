"""The page in English and Simplified Chinese (gr.I18n: the browser's language picks; Settings, at the page's foot,
switches it).

A key is the English text itself, so the English page reads as before and a text not translated yet stays English
(tests/webui/test_browser_i18n.py fails on English left in zh-CN, apart from proper names and the English example texts).
Three ways in, one table of Chinese by English (TABLE):
- `t` (a fixed text) and `tr` (a text built with the page, such as what runs on this machine, with its Chinese made
  beside it) for what the page is built with: labels, help, notes, tab names (their table: webui/i18n/labels.py).
- `localized(message, request)` for what is made at run time, by the request's Accept-Language (gr.I18n translates
  only what the page was built with): a `Said` (chattts_lab/said.py: the library's and the page's sentences keep
  their template and values) is said by its template (SAID_ZH, below); a fixed text by the table; the
  library's mistakes and the hardware panel's lines by their patterns (MESSAGES_ZH).
- `translator(request)`, the `say` the plots take (chattts_lab.history.plots and .figures): titles, axis and legend
  titles, series names and notes are drawn in the page's language; the empty plots are drawn again when a page opens.
Translated: every label, help and note; the estimate, quick preset and hardware panel; the sweep's and serving
run's status lines whole, their progress and toasts; the recommendation, quality floor and gain over stock; the "In
use" note and "Use the fastest"; the History tab, voice card and library; the metrics line, the synthetic-weights
banner; the commonest mistakes. Not translated: proper names, the tables' column names and values, the English
example texts, the Ray cluster's description in the fleet's plan, and why an engine cannot run a precision (they
name kernels and builds); Settings' switch does not reach run-time messages (they follow the browser's language).
"""

from __future__ import annotations

import re
from collections import ChainMap
from typing import Callable

import gradio as gr

from chattts_lab.said import Said
from webui.i18n.labels import I18N, ZH, t, tr  # noqa: F401  the page's labels, imported from here by the tabs

# The sentences made at run time (chattts_lab.said.Said, by their English template: a template's Chinese uses the
# same {name} fields, one only English needs, such as a plural's "s", left out), and the texts inside the plots.
SAID_ZH = {
    # the capacity search (bench.serving.capacity)
    "{lost} of {requests} requests failed or were lost": "{requests} 个请求中有 {lost} 个失败或丢失",
    "p99 time to first audio {ttfa} s > {limit:g} s": "p99 首段音频时间 {ttfa} s > {limit:g} s",
    "continuity {continuity} % < {limit:g} %": "连续性 {continuity} % < {limit:g} %",
    "with every row started together this machine makes {floor:.1f} real-time streams of this configuration: it "
    "cannot keep one listener fed, whatever the scheduling; a faster engine or precision raises the floor":
        "所有行同时开始时，本机只能生成 {floor:.1f} 路此配置的实时流：无论怎样调度都无法满足一个收听者；"
        "更快的引擎或精度才能提高下限",
    "one listener alone is served {lone:.2f} s of audio a second here, where real time needs 1 and a stall-free "
    "stream needs headroom: a lone stream's steps and chunk decodes are too slow, whatever the scheduling; a faster "
    "engine or precision raises it":
        "单个收听者在本机每秒只得到 {lone:.2f} 秒音频，而实时需要 1 秒、无卡顿的流还需要余量："
        "单路流的生成步骤和分块解码本身就太慢，与调度无关；更快的引擎或精度才能改善",
    "the capacity is at the machine's floor: more streams need a faster step (the floor raised), not better scheduling":
        "容量已达到本机的下限：要支撑更多的流需要更快的单步（提高下限），而不是更好的调度",
    "every one of the {rows} rows streams in real time, so the capacity is the row limit (--max-rows): started "
    "together they make {floor:.1f} s of audio a second, {each:.2f}x real time each, and a row more would leave each "
    "{more:.2f}x, little headroom for stalls where that is near 1":
        "{rows} 行全部实时出流，所以容量就是行数上限（--max-rows）：同时开始时每秒生成 {floor:.1f} 秒音频，每行为实时的 {each:.2f} 倍；再加一行则每行只剩 {more:.2f} 倍，接近 1 时几乎没有余量来避免卡顿",
    "at {users} streams each is made at only {speed:.2f}x real time (median), too little headroom for a stall-free "
    "stream whatever the scheduling; {rows} rows started together make more audio only by sharing the GPT's steps "
    "(each row's prompt and chunk decodes are its own): a faster engine or precision, or cheaper chunk decodes, raise it":
        "{users} 路流时每路只以实时的 {speed:.2f} 倍生成（中位数），余量太小，无论怎样调度都无法无卡顿；{rows} 行同时开始时生成的音频更多，只是因为共享了 GPT 的生成步骤（每行的提示词和分块解码仍是各自的开销）：更快的引擎或精度、或更便宜的分块解码才能提高它",
    " (at {users} streams: {why})": "（{users} 路流时：{why}）",
    "{lost:.0f} % of what the machine makes is lost to scheduling{why}: first audio and stalls break the service level "
    "before the machine runs out of audio":
        "本机生成能力的 {lost:.0f} % 损失在调度上{why}：在本机的音频产出用尽之前，首段音频时间和卡顿就已打破服务水平",
    "continuous batching, {rows} rows": "连续批处理，{rows} 行",
    "request-level batching, batches of up to {size}": "请求级批处理，每批最多 {size} 个",
    "the running app's own scheduling": "运行中应用自身的调度",
    "the app default": "应用默认配置",
    ", {pct:.0f} % of the {floor:.1f} this machine makes with {rows} started together":
        "，为本机 {rows} 行同时开始时可生成的 {floor:.1f} 路的 {pct:.0f} %",
    "; at {users}: {why}": "；{users} 路时：{why}",
    " (the most users tried: raise --max-users to look further)": "（已达到最多尝试的用户数：提高 --max-users 可继续查找）",
    " Diagnosis: {diagnosis}.": " 诊断：{diagnosis}。",
    "this machine holds {streams} real-time stream(s) of this configuration ({config}; {how}; {tokens} tokens a "
    "request) with p99 first audio <= {ttfa:g} s and >= {continuity:g} % of streams without a stall over 100 ms"
    "{floor}{broke}.{trust}{diagnosis}":
        "本机可支撑 {streams} 路此配置的实时流（{config}；{how}；每请求 {tokens} 个 token），p99 首段音频时间 "
        "<= {ttfa:g} s，且 >= {continuity:g} % 的流没有超过 100 ms 的卡顿{floor}{broke}。{trust}{diagnosis}",
    "at ${price:g} per hour ({source}), no cost per audio hour: not one stream held.":
        "按每小时 ${price:g}（{source}），无法给出每音频小时成本：连一路流都支撑不了。",
    "at ${price:g} per hour ({source}), {streams} real-time stream(s) make audio at ${cost:.4g} per audio hour.":
        "按每小时 ${price:g}（{source}），{streams} 路实时流的音频成本为每音频小时 ${cost:.4g}。",
    "neither scheduling holds one real-time stream of this configuration within the service level.":
        "两种调度方式都无法在服务水平内支撑一路此配置的实时流。",
    " Measured twice at {streams}: p99 first audio {ttfa}, continuity {continuity}{broke}.":
        "在 {streams} 路时测了两次：p99 首段音频 {ttfa}，连续性 {continuity}{broke}。",
    "; the second run broke ({why})": "；第二次被打破（{why}）",
    " Poisson arrivals at {load:g} % of it for {duration:g} s ({requests} requests): {verdict}; p90 first audio {ttfa} "
    "s against a lone listener's {lone} s, continuity {continuity} %.":
        "按其 {load:g} % 的泊松到达运行 {duration:g} s（{requests} 个请求）：{verdict}；p90 首段音频 {ttfa} s，"
        "单个收听者为 {lone} s，连续性 {continuity} %。",
    "p90 first audio {ttfa} s > {x:g}x a lone listener's {lone} s{waiting}{full_loop}": "p90 首段音频时间 {ttfa} s > 单个听众的 {lone} s 的 {x:g} 倍{waiting}{full_loop}",
    ", mostly waiting for a free row (p90 {queue} s): bursts of arrivals found every row busy": "，主要是在等待空闲行（p90 {queue} s）：成批到达的请求发现每一行都在忙",
    "; beside {others} others a row is made {slower:.1f}x slower than alone ({each:.2f} against {lone:.2f} s of "
    "audio a second), so a first audio in a full loop takes about that many times a lone listener's before any wait":
        "；与其他 {others} 行一起时，每行的生成速度比单独时慢 {slower:.1f} 倍（每秒 {each:.2f} 秒音频，单独时 {lone:.2f} 秒），所以在满载的循环中，即使不排队，首段音频也大约要单个听众的这么多倍时间",
    "confirmed": "已确认", "not confirmed ({why})": "未确认（{why}）",
    "continuous batching holds {streams} {stream} where request-level batching holds none.":
        "连续批处理可支撑 {streams} 路流，而请求级批处理一路也支撑不了。",
    "continuous batching holds {ratio:.1f}x the real-time streams of request-level batching ({continuous} vs "
    "{request}).": "连续批处理支撑的实时流是请求级批处理的 {ratio:.1f} 倍（{continuous} 对 {request}）。",
    # the serving benchmark (bench.serving.summaries)
    "{users} {user} at once, batches of up to {size} against one at a time: {audio:.2f}x the audio per second "
    "({best_audio:.2f} vs {one_audio:.2f} audio s/s), p90 latency {latency:.2f}x ({best_p90:.2f} s vs {one_p90:.2f} "
    "s), time to first audio p90 {best_ttfa:.2f} s vs {one_ttfa:.2f} s.{slowest}":
        "{users} 个用户同时请求，每批最多 {size} 个对比一次一个：每秒音频为 {audio:.2f} 倍（{best_audio:.2f} 对 "
        "{one_audio:.2f} 音频秒/秒），p90 延迟为 {latency:.2f} 倍（{best_p90:.2f} s 对 {one_p90:.2f} s），p90 首段音频"
        "时间 {best_ttfa:.2f} s 对 {one_ttfa:.2f} s。{slowest}",
    " The slowest first audio of the {users} users ({p99:.2f} s, p99) is {times:.1f}x a single user's.":
        "{users} 个用户中最慢的首段音频（{p99:.2f} s，p99）是单个用户的 {times:.1f} 倍。",
    # drift and ratios (chattts_lab.history.compare)
    "Drift not checked: it needs at least 2 finished interleaved passes over at least 2 cells (--passes 3 or more; a "
    "stopped sweep may not have finished 2).":
        "未检查漂移：需要至少 2 个单元完成至少 2 轮交错测量（--passes 3 或更多；停止的扫描可能没有完成 2 轮）。",
    "Drift across passes {drift:.1f} % (threshold {threshold:g} %).": "各轮之间的漂移 {drift:.1f} %（阈值 {threshold:g} %）。",
    "Drift across passes {drift:.1f} % (threshold {threshold:g} %): NOISY. The machine's speed changed during the "
    "sweep, so absolute times (RTF, ms per step) are not reliable. Ratios between cells of the same passes hold "
    "better, and their intervals show what is left. Stop other work on the machine (check the load average) and run "
    "the sweep again, with more --passes to narrow the intervals.":
        "各轮之间的漂移 {drift:.1f} %（阈值 {threshold:g} %）：有噪声。扫描期间本机速度有变化，绝对时间（RTF、每步毫秒数）"
        "不可靠。同一轮中各单元之间的比值更可靠，其置信区间显示剩余的不确定性。请停止本机上的其他工作（查看负载），"
        "然后用更多的 --passes 重新运行扫描以缩小区间。",
    "{a} is {ratio:.3g}x as fast as {b} (too few timed calls for an interval)":
        "{a} 的速度是 {b} 的 {ratio:.3g} 倍（计时调用太少，无法给出区间）",
    "; the interval leaves out the ratio itself: too few calls, measure more": "；区间不包含比值本身：调用太少，请多测几次",
    "no difference measured between {a} and {b} (ratio {ratio:.3g}x, {pct} CI {low:.3g}-{high:.3g}x{unstable})":
        "{a} 与 {b} 之间未测出差异（比值 {ratio:.3g} 倍，{pct} 置信区间 {low:.3g}-{high:.3g} 倍{unstable}）",
    "{a} is {ratio:.3g}x faster than {b} ({pct} CI {low:.3g}-{high:.3g}x{unstable})":
        "{a} 比 {b} 快 {ratio:.3g} 倍（{pct} 置信区间 {low:.3g}-{high:.3g} 倍{unstable}）",
    # the plan of an interleaved sweep (chattts_lab.sweep.interleave)
    "{passes} interleaved passes over {cells} cells, a fresh random order each pass; each pass makes one timed call of "
    "every cell. Every cell's worker stays loaded between passes (about {per_worker:.0f} MB each), and makes one more "
    "untimed call once all are loaded.":
        "{cells} 个单元共 {passes} 轮交错测量，每轮使用新的随机顺序；每轮对每个单元计时调用一次。各单元的工作进程在"
        "各轮之间保持加载（每个约 {per_worker:.0f} MB），全部加载后各做一次不计时的调用。",
    "{passes} interleaved passes over {cells} cells, a fresh random order each pass; each pass makes one timed call of "
    "every cell. {resident} worker(s) stay loaded and {reloaded} are loaded again before their turn in each pass: "
    "about {per_worker:.0f} MB a worker, {allowance:.0f} MB allowed for all. Loading, the cold call and warm-up are "
    "never timed.":
        "{cells} 个单元共 {passes} 轮交错测量，每轮使用新的随机顺序；每轮对每个单元计时调用一次。{resident} 个工作进程"
        "保持加载，{reloaded} 个在每轮轮到时重新加载：每个约 {per_worker:.0f} MB，总共允许 {allowance:.0f} MB。"
        "加载、冷调用和预热从不计时。",
    "{cells} cell(s) as Ray tasks on {cluster}; each in a fresh worker process on its node, with the CPUs of its "
    "threads to itself, its timed calls back to back.":
        "{cells} 个单元作为 Ray 任务运行于 {cluster}；每个单元在其节点上的新工作进程中运行，独占其线程数的 CPU，"
        "计时调用连续进行。",
    # the recommendation (chattts_lab.history.recommend)
    "No successful cells yet: run a sweep first (failed cells cannot be recommended).":
        "还没有成功的单元：请先运行扫描（失败的单元不能被推荐）。",
    "No configuration fits in {budget:,.0f} MB: the lightest ({name}) peaks at {peak:,.0f} MB.":
        "没有配置能放进 {budget:,.0f} MB：最轻的（{name}）峰值为 {peak:,.0f} MB。",
    "Next: {name} at RTF {rtf:.2f}.": "其次：{name}，RTF {rtf:.2f}。",
    "Left out over the memory budget: {names}.": "因超出内存预算而排除：{names}。",
    "No batch-1 cells were measured, so this compares larger batches.": "没有测量批大小为 1 的单元，所以这里比较的是更大的批。",
    "faster": "快", "slower": "慢",
    ", p50 latency {latency:.2f} s for {tokens} tokens": "，{tokens} 个 token 的 p50 延迟 {latency:.2f} s",
    ", peak RSS {peak:,.0f} MB": "，峰值 RSS {peak:,.0f} MB",
    " (budget {budget:,.0f} MB)": "（预算 {budget:,.0f} MB）",
    "**{name}**: RTF {rtf:.2f} ({factor:.1f}× {speed} than real time){latency}{memory}{budget}.":
        "**{name}**：RTF {rtf:.2f}（比实时{speed} {factor:.1f} 倍）{latency}{memory}{budget}。",
    "Its GPT step takes {step:.1f} ms against a floor of {floor:.1f} ms (reading {weights:,.0f} MB of weights at "
    "{gbps:.1f} GB/s): roofline {roofline:.2f}, {times:.1f}× the floor.":
        "它的 GPT 单步耗时 {step:.1f} ms，下限为 {floor:.1f} ms（以 {gbps:.1f} GB/s 读取 {weights:,.0f} MB 权重）："
        "roofline {roofline:.2f}，是下限的 {times:.1f} 倍。",
    "{device} · {engine} · {precision} · {threads} threads": "{device} · {engine} · {precision} · {threads} 个线程",
    "quality is {why}": "音质{why}",
    "not meaningful on synthetic weights": "在合成权重上没有意义",
    "no quality was measured (run the sweep with --quality)": "没有测量音质（运行扫描时加上 --quality）",
    "No recommendation under a quality floor: {why}.": "无法给出满足音质下限的推荐：{why}。",
    "within {mos:g} MOS and {wer:g} points of WER of stock fp32":
        "与 stock fp32 相比 MOS 相差不超过 {mos:g}、WER 相差不超过 {wer:g} 个百分点",
    "No configuration is {floor}.": "没有配置满足：{floor}。",
    "**{name}** is the fastest {floor}: RTF {rtf:.2f}, {quality}.": "**{name}** 是满足{floor}的最快配置：RTF {rtf:.2f}，{quality}。",
    "Faster but below the floor: {rows}.": "更快但低于下限：{rows}。",
    "{name} (RTF {rtf:.2f}, {quality})": "{name}（RTF {rtf:.2f}，{quality}）",
    "Quality models: {models}.": "音质模型：{models}。",
    "MOS {mos:.2f} ({mos_delta:+.2f}), WER {wer:.1f} % ({wer_delta:+.1f} points){similarity}":
        "MOS {mos:.2f}（{mos_delta:+.2f}），WER {wer:.1f} %（{wer_delta:+.1f} 个百分点）{similarity}",
    ", speaker similarity {sim:.2f}": "，说话人相似度 {sim:.2f}",
    # the configuration an app serves (chattts_lab.history.recommend.served_default, chattts_lab/serve/runtime.py)
    "{why}, so the default stays": "{why}，所以保持默认配置",
    "no sweep on this machine yet": "本机还没有扫描",
    "{reason} ({why}, so it did not count)": "{reason}（{why}，所以不计入）",
    "sweep #{sweep} measured nothing that runs in this app{note}": "扫描 #{sweep} 没有测出能在本应用中运行的配置{note}",
    "the recommendation of sweep #{sweep} on this machine (lowest RTF at batch 1), which is also the default{note}":
        "本机扫描 #{sweep} 的推荐（批大小 1 时 RTF 最低），它也是默认配置{note}",
    "the recommendation of sweep #{sweep} on this machine (lowest RTF at batch 1), faster than the default {default} "
    "{how}{note}": "本机扫描 #{sweep} 的推荐（批大小 1 时 RTF 最低），比默认配置 {default} 更快 {how}{note}",
    "the default, {default}: sweep #{sweep}'s fastest, {fastest}, is not faster than it {how}{note}":
        "默认配置 {default}：扫描 #{sweep} 中最快的 {fastest} 并不比它快 {how}{note}",
    "sweep #{sweep} measured the model {measured!r}, not this app's {model!r}":
        "扫描 #{sweep} 测量的是模型 {measured!r}，而不是本应用的 {model!r}",
    "sweep #{sweep} was noisy (its passes drifted {drift:.1f} %)": "扫描 #{sweep} 有噪声（各轮漂移 {drift:.1f} %）",
    "in the same sweep": "同一次扫描中", "in this machine's history": "本机历史中",
    "(RTF {cand:.2f} against {base:.2f} {where})": "（{where} RTF {cand:.2f} 对 {base:.2f}）",
    "by the engines' reference figures ({c:g} against {d:g} ms per step; the default was not measured here)":
        "依据引擎的参考数据（每步 {c:g} 对 {d:g} ms；本机未测量默认配置）",
    "; its fastest cell, {label}, cannot run in this app: {reason}": "；其最快的单元 {label} 不能在本应用中运行：{reason}",
    "{engine} · {precision} · {device} · {threads} {thread}": "{engine} · {precision} · {device} · {threads} 个线程",
    "; {engine} {precision} computes stock fp32's audio": "；{engine} {precision} 算出的音频与 stock fp32 相同",
    "; {engine} {precision} is faster still (its audio differs more)": "；{engine} {precision} 更快（音频差异更大）",
    "no sweep on this machine yet: {why}{exact}{faster}": "本机还没有扫描：{why}{exact}{faster}",
    "lab {precision} on torch's and fbgemm's kernels ({why})": "lab {precision}，使用 torch 和 fbgemm 的内核（{why}）",
    "{cpu}: lab {precision} on the lab's {level} kernels": "{cpu}：lab {precision}，使用 lab 自己的 {level} 内核",
    "AVX-512 with VNNI": "AVX-512（含 VNNI）", "AVX-512 without VNNI": "AVX-512（无 VNNI）",
    "AVX2 with AVX-VNNI, without AVX-512": "AVX2（含 AVX-VNNI，无 AVX-512）", "AVX2 without AVX-512": "AVX2（无 AVX-512）",
    "no AVX2": "无 AVX2", "no C++ compiler or ninja on this machine": "本机没有 C++ 编译器或 ninja",
    "torch's default threads": "torch 默认线程数",
    "{n} {thread}": "{n} 个线程",
    "{engine} · {precision} · {device} · {threads}": "{engine} · {precision} · {device} · {threads}",
    "chosen on this page": "在本页选择", "chosen on the command line": "在命令行中指定",
}

SAID_ZH.update({
    # the sweep's estimate and the quick preset (chattts_lab.sweep.grid, webui/benchmark/sweep_form.py)
    "{cells} cell(s) ({ruled} skipped or unsupported by rule{done}), roughly {time} (estimated from {basis}; each cell "
    "runs in a fresh process)": "{cells} 个单元（其中 {ruled} 个按规则跳过或不支持{done}），约需 {time}（根据{basis}估计；"
                                "每个单元在新进程中运行）",
    ", {done} measured already": "，{done} 个已测过", "this machine's past sweeps": "本机以往的扫描",
    "the README's reference machine": " README 的参考机器",
    "Fill in the quick sweep (stock vs lab, about {time} here)": "填入快速扫描（stock 对比 lab，本机约需 {time}）",
    "**Quick sweep filled in** (stock against lab, fp32, int8 and int4, batch 1, short clips): the estimate is below the "
    "settings; press **Run sweep** to start it.":
        "**已填入快速扫描**（stock 对比 lab，fp32、int8 和 int4，批大小 1，短音频）：估计值在设置下方；按 **运行扫描** 开始。",
    # the banner over synthetic audio (chattts_lab.SYNTHETIC_WARNING)
    "Synthetic (random) weights: the timings are real, the audio is noise.": "合成（随机）权重：计时是真实的，音频是噪声。",
    # the Synthesis tab's runtime (webui/synthesis/handlers.py)
    "**In use:** {settings} ({why}).": "**当前使用：** {settings}（{why}）。",
    "Use the fastest: {settings}": "使用最快的配置：{settings}", "Use the fastest": "使用最快的配置",
    "Applied {device} · {precision} · {threads} · {engine} engine.": "已应用 {device} · {precision} · {threads} · {engine} 引擎。",
    "Nothing of yours is running.": "你没有正在运行的任务。",
    "Interrupting after the current step; you keep the audio made so far.": "将在当前步骤后中断；已生成的音频会保留。",
    "No recommendation yet: run a sweep in the Benchmark tab first.": "还没有推荐：请先在基准测试页运行扫描。",
    # a sweep's status line and progress (webui/benchmark/sweep_run.py)
    "Sweep {sweep} running: {cells} cell(s).": "扫描 {sweep} 运行中：{cells} 个单元。",
    "Sweep {sweep} running.": "扫描 {sweep} 运行中。",
    "Sweep {sweep} {note}.": "扫描 {sweep} {note}。",
    "finished": "已完成", "cancelled": "已停止", "interrupted": "被中断",
    "stopped: every finished row is kept": "已停止：所有已完成的行都保留",
    "starting": "正在开始", "workers loaded": "工作进程已加载",
    ", about {eta} left": "，约剩 {eta}", "measuring {cell}{eta}": "正在测量 {cell}{eta}",
    "pass {no} of {passes}: one timed call of each of {cells} cell(s)": "第 {no}/{passes} 轮：{cells} 个单元各计时调用一次",
    "pass {no} of {passes}: {timed} of {cells} cell(s) timed, about {eta} left":
        "第 {no}/{passes} 轮：已计时 {timed}/{cells} 个单元，约剩 {eta}",
    "{cell}: {status}": "{cell}：{status}",
    "fidelity check: {precision} on {device} vs fp32": "保真度检查：{device} 上的 {precision} 对比 fp32",
    "quality beside stock fp32: {what}": "与 stock fp32 对比音质：{what}",
    "No sweep of yours is running.": "你没有正在运行的扫描。",
    "Stopping: the running cell is ended and every finished row is kept.": "正在停止：结束正在运行的单元，保留所有已完成的行。",
    "No row matches these filters: clear one (its ×) to see the rows again.": "没有符合这些筛选条件的行：清除一个（点它的 ×）即可再次看到各行。",
    "Run a sweep (or Show one from History): its ok rows are drawn here": "运行一次扫描（或从历史中显示一次）：成功的行会画在这里",
    # the gain over stock fp32 (chattts_lab/history/figures.py)
    "Add stock fp32 to the sweep to see the gain over ChatTTS as shipped.": "在扫描中加入 stock fp32，即可看到相对原版 ChatTTS 的提升。",
    "on {machine}": "（在 {machine} 上）", "on this machine": "（在本机上）", ", streaming": "，流式",
    "{device}, batch {batch}, {threads} threads, {tokens} tokens{streaming}":
        "{device}，批大小 {batch}，{threads} 个线程，{tokens} 个 token{streaming}",
    "**{phrase} {where}** (RTF {rtf:.3g} vs {base_rtf:.3g}; {context}; RTF is compute seconds per audio second; the "
    "interval is from the raw timed calls).": "**{phrase}{where}**（RTF {rtf:.3g} 对 {base_rtf:.3g}；{context}；"
                                             "RTF 是每秒音频所需的计算秒数；区间来自原始计时调用）。",
    # the History tab and the recommendation (webui/benchmark/sweep_history.py, webui/benchmark/quality_panel.py)
    "Showing sweep(s) {ids}.": "正在显示扫描 {ids}。",
    "Could not import that bundle: {why}": "无法导入该结果包：{why}",
    "Imported sweep(s) {ids}; {skipped} already present.": "已导入扫描 {ids}；{skipped} 个已存在。",
    "none": "无", "missing": "缺失", "no configuration ok in both": "没有在两次扫描中都成功的配置",
    "**Speed, sweep #{b} against #{a}:**": "**速度，扫描 #{b} 对比 #{a}：**",
    "Show in the Sweep tab: pick one or more sweeps in the Sweeps box first.": "在扫描页显示：请先在“扫描”框中选择一次或多次扫描。",
    "Compare: pick two different sweeps, as Sweep A and Sweep B.": "比较：请选择两次不同的扫描，作为扫描 A 和扫描 B。",
    "Export bundle: pick the sweeps to export in the Sweeps box first.": "导出结果包：请先在“扫描”框中选择要导出的扫描。",
    "Download: run a sweep, or Show one from the History tab, first.": "下载：请先运行一次扫描，或从历史页显示一次。",
    "Run or load a sweep measured with quality.": "运行或载入一次测量了音质的扫描。",
    # the voice card and library toasts (webui/synthesis/voice_handlers.py)
    "Sample clip refused: {why}.": "样本音频被拒绝：{why}。", "set a voice seed first": "请先设置音色种子",
    ", replacing the one saved under that name before": "，替换了之前以此名称保存的音色",
    "Saved voice '{name}'{replacing}: pick it in Saved voice; the OpenAI-compatible endpoint accepts voice='{name}'.":
        "已保存音色“{name}”{replacing}：可在“已保存的音色”中选择；OpenAI 兼容接口可用 voice='{name}'。",
    "Could not read the saved voice '{name}': {why}": "无法读取已保存的音色“{name}”：{why}",
    "No saved voice '{name}' any more (deleted from {folder}?).": "已没有名为“{name}”的音色（是否已从 {folder} 中删除？）。",
    "Could not import that voice card: {why}": "无法导入该音色卡：{why}",
    "Imported voice '{name}'.": "已导入音色“{name}”。",
    # the Serving panel's status line and toasts (webui/benchmark/serving_tab.py)
    "Starting: `{command}`": "正在启动：`{command}`",
    "The serving run stopped: {why}": "服务测试已停止：{why}",
    "Capacity run {run}: raising the users until the service level breaks (an app starts per scheduling).":
        "容量测试 {run}：逐步增加用户数，直到服务水平被打破（每种调度方式启动一个应用）。",
    "Serving run {run}: {levels} load levels (an app starts per batch limit).":
        "服务测试 {run}：{levels} 个负载等级（每个批大小上限启动一个应用）。",
    "Level {level}: {load}, max batch {size}…": "等级 {level}：{load}，最大批大小 {size}……",
    "{n} {user}": "{n} 个用户", "{rate:g} requests/s": "每秒 {rate:g} 个请求",
    "Capacity run {run} {status}.": "容量测试 {run} {status}。", "Serving run {run} {status}.": "服务测试 {run} {status}。",
    "Stopping after the current load level: every finished level is kept.": "将在当前负载等级结束后停止：所有已完成的等级都保留。",
    "No serving run of yours is running.": "你没有正在运行的服务测试。",
})

# The texts inside the plots (chattts_lab.history.plots, chattts_lab/history/figures.py): titles, axis and legend titles, notes.
SAID_ZH.update({
    "Latency vs batch size": "延迟与批大小",
    "RTF by configuration and threads (below 1 is faster than real time)": "各配置与线程数的 RTF（低于 1 即快于实时）",
    "Throughput vs latency": "吞吐量与延迟", "Peak memory during inference": "推理期间的峰值内存",
    "Distance from the memory-bandwidth floor (1 = a GPT step as fast as reading its weights allows)":
        "与内存带宽下限的距离（1 = GPT 单步快到读取其权重所允许的极限）",
    "no successful cells to plot": "没有可绘制的成功单元",
    "not plotted: {not_ok} (see the table for reasons)": "未绘制：{not_ok}（原因见表格）",
    "no cell has a roofline: this sweep did not measure the memory bandwidth": "没有单元有 roofline：这次扫描没有测量内存带宽",
    "{n} thr": "{n} 线程", "{n} tok": "{n} token", "{n} threads": "{n} 个线程", "b{batch}": "批{batch}",
    "batch {batch}": "批大小 {batch}", "real time": "实时", "floor": "下限", "{metric} by machine": "各机器的{metric}",
    "Pareto front": "帕累托前沿", "batch": "批大小", "threads": "线程数",
    "device": "设备", "precision": "精度", "batch size": "批大小", "audio tokens": "音频 token 数", "engine": "引擎",
    "latency p50 (s)": "p50 延迟（秒）", "latency std (s)": "延迟标准差（秒）",
    "RTF (wall s / audio s, one item)": "RTF（墙钟秒 / 音频秒，单条）", "throughput (audio s / wall s)": "吞吐量（音频秒 / 墙钟秒）",
    "GPT ms / step": "GPT 每步毫秒", "peak RSS (MB)": "峰值 RSS（MB）", "peak device memory (MB)": "峰值设备内存（MB）",
    "configuration": "配置", "config": "配置", "machine": "机器", "sweep": "扫描", "time to first audio (s)": "首段音频时间（秒）",
    "roofline (floor ms / step ms; 1 = at the floor)": "roofline（下限毫秒 / 每步毫秒；1 = 达到下限）",
    "floor: weights / bandwidth (ms)": "下限：权重 / 带宽（毫秒）", "weights read per step (MB)": "每步读取的权重（MB）",
    "read bandwidth (GB/s)": "读取带宽（GB/s）",
    "Latency and time to first audio vs users": "延迟、首段音频时间与用户数", "Throughput vs users": "吞吐量与用户数",
    "no closed-loop levels to plot": "没有可绘制的闭环负载等级", "one at a time": "一次一个", "as the app runs": "按应用当前设置",
    "batches of up to {size}": "每批最多 {size} 个", "latency p90": "p90 延迟", "first audio p90": "p90 首段音频",
    "concurrent users": "并发用户数", "latency p90 (s, queue included)": "p90 延迟（秒，含排队）",
    "audio seconds per wall second (all users)": "每墙钟秒的音频秒数（所有用户）", "seconds": "秒",
    "app (max batch)": "应用（最大批大小）", "measure": "指标",
    "Capacity: p99 first audio vs real-time streams": "容量：p99 首段音频时间与实时流数",
    "held": "满足", "broke": "打破", "{scheduling} ({streams} held)": "{scheduling}（支撑 {streams} 路）", "the app": "应用",
    "tick 'Find capacity' and run: each level tried appears here": "勾选“查找容量”并运行：每个尝试的等级都会显示在这里",
    "concurrent streams (closed-loop users)": "并发流数（闭环用户）", "p99 first audio (s)": "p99 首段音频（秒）",
    "scheduling": "调度方式", "service level": "服务水平", "continuity %": "连续性 %", "first-audio limit": "首段音频上限",
    "RTF vs {quality}": "RTF 与{quality}", "RTF vs quality": "RTF 与音质", "no sweep shown yet": "还没有显示扫描",
    "predicted MOS (DNSMOS overall; higher is better)": "预测 MOS（DNSMOS 总分；越高越好）",
    "WER % (lower is better)": "WER %（越低越好）", "speaker similarity to stock fp32": "与 stock fp32 的说话人相似度",
    "RTF (lower is faster; faster to the right)": "RTF（越低越快；越往右越快）",
})

TABLE = ChainMap(SAID_ZH, ZH)  # every Chinese text by its English: the sentences made at run time, then the page's


# The mistakes people make most often, as the library words them (chattts_lab.requests, .voices) and in Chinese. A
# message is written when a request fails, so its language comes from the request (the browser's Accept-Language);
# one not listed here stays English.
MESSAGES_ZH = [
    (r"text( \d+)? is empty", "文本{0}为空"),
    (r"text( \d+)? has nothing to speak \(only spaces, punctuation, symbols or tags\)",
     "文本{0}没有可朗读的内容（只有空格、标点、符号或标记）"),
    (r"text is ([\d,]+) characters; at most ([\d,]+) per request", "文本有 {0} 个字符；每次请求最多 {1} 个"),
    (r"unknown voice '(.+)'; known voices: (.+) or seed:N", "未知的音色“{0}”；可用的音色：{1}，或 seed:N"),
    (r"speaker string is empty", "说话人字符串为空"),
    (r"speaker string is malformed or truncated.*", "说话人字符串格式错误或不完整：请重新完整复制（“显示此种子的说话人字符串”）"),
    (r"voice card is not valid JSON \((.+)\)", "音色卡不是有效的 JSON（{0}）"),
    (r"a sample-audio voice needs the transcript of its clip", "样本音频音色需要这段音频的文字稿"),
    # the Benchmark tab's mistakes and the hardware panel's lines
    (r"Sweep settings: (.+)", "扫描设置有误：{0}"),
    (r"Machine price: (.+)", "机器价格有误：{0}"),
    (r"CPU: (.+) \((.+)\), (\S+) usable / (\S+) logical cores; flags: (.+)",
     "CPU：{0}（{1}），可用 {2} 核 / 逻辑 {3} 核；指令集：{4}"),
    (r"RAM: (.+) GB; GPUs: none", "内存：{0} GB；GPU：无"),
    (r"RAM: (.+) GB; GPUs: (.+)", "内存：{0} GB；GPU：{1}"),
    (r"OS: (.+); host (.+)", "操作系统：{0}；主机 {1}"),
    (r"Software: (.+)", "软件：{0}"),
    (r"BLAS: (\S+) \(MKL (\S+), oneDNN (\S+), kernels (\S+), threads (\S+), CUDA build (\S+)\)",
     "BLAS：{0}（MKL {1}，oneDNN {2}，内核 {3}，线程 {4}，CUDA 构建 {5}）"),
    (r"Code: commit (\S+) \(uncommitted changes\)", "代码：提交 {0}（有未提交的修改）"),
    (r"Code: commit (\S+)", "代码：提交 {0}"),
    (r"Load average at start: (.+)", "开始时的负载：{0}"),
]


def wants_chinese(request: gr.Request | None) -> bool:
    """Whether the browser that sent `request` (a gr.Request, or None) prefers Chinese."""
    headers = getattr(request, "headers", None) or {}
    return str(headers.get("accept-language", "")).lower().startswith("zh")


def localized(message: str, request: gr.Request | None) -> str:
    """A message in the language of the browser that made the request: a Said by its template, a fixed text by
    the tables, one of the library's mistakes by its pattern (MESSAGES_ZH); English when not translated."""
    if not wants_chinese(request) or not message:
        return message
    if isinstance(message, Said):
        return in_chinese(message, TABLE)
    for pattern, chinese in MESSAGES_ZH:
        if m := re.fullmatch(pattern, message, re.S):
            return chinese.format(*[(g or "").strip() for g in m.groups()])
    return TABLE.get(message, message)


def translator(request: gr.Request | None) -> Callable[[str], str]:
    """What the plots' texts go through for `request`'s browser (chattts_lab.history.plots' `say`)."""
    return (lambda text: in_chinese(text, TABLE)) if wants_chinese(request) else (lambda text: text)


def in_chinese(message: str, table: dict) -> str:
    """`message` in Chinese: a Said by its template (its values said in Chinese too), a plain text by the table;
    what is not in it stays English. A template of fields alone (Said.joined) needs no entry."""
    if not isinstance(message, Said):
        return table.get(message, message)
    template = table.get(message.template)
    if template is None:
        if not re.fullmatch(r"(\{\w+\}[^\w{}]*)*", message.template):
            return str(message)
        template = re.sub(r"\}\s+\{", "}{", message.template)  # Chinese sentences follow one another unspaced
    values = {name: in_chinese(value, table) if isinstance(value, str) else value
              for name, value in message.params.items()}
    return template.format(**values)
