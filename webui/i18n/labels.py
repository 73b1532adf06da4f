"""The page's labels, help and notes in Simplified Chinese, keyed by their English (gr.I18n: the browser's
language picks; Settings, at the page's foot, switches it); webui/i18n/texts.py says how every text is translated."""

from __future__ import annotations

import gradio as gr

from chattts_lab.metrics import STEPS_PER_AUDIO_SECOND

ZH = {
    # the page
    "Try ChatTTS voices and measure how fast they run on this machine.":
        "试听 ChatTTS 的音色，并测量它在这台机器上的运行速度。",
    "Synthesis": "语音合成",
    "Benchmark": "基准测试",
    # text
    "Text": "文本",
    "Inline control tokens work: [uv_break] [laugh] [lbreak]": "文本中可使用控制标记：[uv_break] [laugh] [lbreak]",
    "Examples": "示例",
    "Generate": "生成",
    "Interrupt": "中断",
    "Stream (play while generating)": "流式（边生成边播放）",
    "Split long text into sentences (batched)": "长文本按句拆分（批量生成）",
    # voice
    "Voice": "音色",
    "Voice from": "音色来源",
    "Seed / preset": "种子 / 预设",
    "Speaker string": "说话人字符串",
    "Sample audio": "样本音频",
    "Preset voice": "预设音色",
    "a named seed: the same voice every time (noise on random weights)":
        "有名字的种子：每次都是同一个音色（随机权重下是噪声）",
    "Saved voice": "已保存的音色",
    "cards saved to the voice library": "保存在音色库中的音色卡",
    "Voice seed": "音色种子",
    "Random voice": "随机音色",
    "Speaker embedding (copy / paste)": "说话人嵌入（复制 / 粘贴）",
    "paste a speaker string to reuse a voice": "粘贴说话人字符串即可复用音色",
    "Show the speaker string for this seed": "显示此种子的说话人字符串",
    "Sample clip (voice from a recording)": "样本音频（从录音中取音色）",
    "Transcript of the clip": "音频的文字稿",
    # voice card
    "Voice card: export / import": "音色卡：导出 / 导入",
    "A small JSON with the speaker embedding, seeds and parameters: the voice reproduces on another machine. Saved "
    "cards are also voices for the OpenAI-compatible endpoint.":
        "一个小 JSON 文件，包含说话人嵌入、种子和参数：在另一台机器上也能复现同一个音色。保存的音色卡也可作为 "
        "OpenAI 兼容接口的音色。",
    "Voice name": "音色名称",
    "Export voice card": "导出音色卡",
    "Save to voice library": "保存到音色库",
    "Voice card (download)": "音色卡（下载）",
    "Import a voice card": "导入音色卡",
    # sampling
    "Sampling": "采样",
    "Temperature": "温度",
    "Sampling seed": "采样种子",
    "blank: random": "留空：随机",
    "Text seed (refine)": "文本种子（润色）",
    "Speed": "语速",
    "Refine text first": "先润色文本",
    "Oral": "口语化",
    "Laugh": "笑声",
    "Break": "停顿",
    f"Max audio tokens ({STEPS_PER_AUDIO_SECOND:.1f} per second)":
        f"最大音频 token 数（每秒 {STEPS_PER_AUDIO_SECOND:.1f} 个）",
    "Min audio tokens": "最小音频 token 数",
    # runtime
    "Runtime": "运行配置",
    "Device": "设备",
    "Engine": "引擎",
    "Precision": "精度",
    "Threads": "线程数",
    "Apply the best configuration from the benchmark": "应用基准测试推荐的最佳配置",
    # results
    "Stream": "流式播放",
    "Audio": "音频",
    "Audio (the whole stream: play it again or download it)": "音频（完整的流式结果：可重播或下载）",
    "Raw measurements (JSON)": "原始测量数据（JSON）",
    "Measurements": "测量数据",
    # the Benchmark tab (labels, buttons, help; its sentences and tables are not translated yet)
    "Fleet: run the cells on a Ray cluster's machines (README: fleet sweeps)":
        "集群：在 Ray 集群的机器上运行各个单元（见 README：fleet sweeps）",
    "More measurement settings (as in python -m bench)": "更多测量设置（与 python -m bench 相同）",
    "Apply to the Synthesis tab": "应用到语音合成页",
    "Compare": "比较",
    "Download CSV / JSON / HTML": "下载 CSV / JSON / HTML",
    "Export bundle": "导出结果包",
    "Recommend": "推荐",
    "Refresh": "刷新",
    "Run sweep": "运行扫描",
    "Show in the Sweep tab": "在扫描页显示",
    "Stop": "停止",
    "### Compare two sweeps (or two machines)": "### 比较两次扫描（或两台机器）",
    "### Recommendation for this machine": "### 本机推荐配置",
    "Hardware": "硬件",
    "History": "历史",
    "Serving": "服务",
    "Sweep": "扫描",
    "1,2 or 1-4; empty: every usable core": "1,2 或 1-4；留空：所有可用核心",
    "1,4,8 or 1-8*2": "1,4,8 或 1-8*2",
    "CUDA only": "仅限 CUDA",
    "above it the sweep is marked noisy": "超过此值，扫描会被标记为有噪声",
    "empty: no limit; over it a cell is oom": "留空：不限；超过则该单元记为 oom",
    "on also measures time to first audio": "开启时也测量首段音频时间",
    "ray (a cluster started on this machine) or ray:HOST:PORT of its head": "ray（在本机启动的集群）或其头节点的 ray:HOST:PORT",
    "As recorded with every sweep": "每次扫描时记录的信息",
    "Audio tokens": "音频 token 数",
    "Batch sizes": "批大小",
    "Bundle (download)": "结果包（下载）",
    "Comparison": "比较结果",
    "Devices (present here)": "设备（本机已有）",
    "Distance from the memory-bandwidth floor": "与内存带宽下限的距离",
    "Drift threshold (%)": "漂移阈值（%）",
    "Engines": "引擎",
    "Fidelity check (drift from fp32)": "保真度检查（相对 fp32 的偏差）",
    "Fidelity tokens": "保真度检查 token 数",
    "Filter: device": "筛选：设备",
    "Filter: precision": "筛选：精度",
    "Filter: status": "筛选：状态",
    "Import a bundle": "导入结果包",
    "Import the kept result": "导入所选结果",
    "Kept results shipped with the app (docs/results)": "随应用附带的结果（docs/results）",
    "Interleaved passes": "交错轮数",
    "Latency vs batch": "延迟与批大小",
    "Machine price ($ per hour)": "机器价格（美元/小时）",
    "Machines (node labels)": "机器（节点标签）",
    "Max repeats per cell": "每单元最多重复次数",
    "Memory budget (MB of peak RSS)": "内存预算（峰值 RSS，MB）",
    "Memory budget per cell (MB)": "每单元内存预算（MB）",
    "Metric": "指标",
    "Min seconds per cell": "每单元最少秒数",
    "Past sweeps and serving runs": "以往的扫描与服务测试",
    "Peak memory": "峰值内存",
    "Precisions": "精度",
    "Quality beside stock fp32 (MOS, WER, voice; minutes more)": "与 stock fp32 对比音质（MOS、WER、音色；多花几分钟）",
    "RTF by configuration and threads": "各配置与线程数的 RTF",
    "Ray cluster": "Ray 集群",
    "Repeats": "重复次数",
    "Reports (CSV, JSON, HTML)": "报告（CSV、JSON、HTML）",
    "Side by side: the metric for each configuration ok in both, once you Compare": "并排：两次都成功的每个配置的指标（点“比较”后显示）",
    "Sweep A": "扫描 A",
    "Sweep B": "扫描 B",
    "Sweeps": "扫描",
    "Throughput vs latency (Pareto front)": "吞吐量与延迟（帕累托前沿）",
    "Timeout per cell (s)": "每单元超时（秒）",
    "Warm-up calls": "预热调用次数",
    "Where the price comes from": "价格来源",
    "Saved machine prices (fills the price fields)": "已保存的机器价格（填入价格栏）",
    "blank: any node": "留空：任意节点",
    "blank: this machine": "留空：本机",
    "e.g. AWS c7a.large on-demand, us-east-1, 2026-12": "例如：AWS c7a.large 按需，us-east-1，2026-12",
}

ZH.update({
    # the Benchmark tab's longer help
    "Results: a row per cell once a sweep runs or History shows one (click a header to sort; failed cells keep their "
    "reason)": "结果：运行扫描或从历史中显示后，每个单元一行（点击表头排序；失败的单元保留原因）",
    "ignored off CUDA, so it stays off on this machine": "非 CUDA 设备上会被忽略，所以本机保持关闭",
    "each pass times every cell once, in a fresh random order (Repeats and Min seconds then do not apply); 1: each "
    "cell in its own process": "每一轮按新的随机顺序为每个单元计时一次（此时“重复次数”和“每单元最少秒数”不适用）；"
                               "1：每个单元在各自的进程中运行",
    "optional: adds $ per audio hour to every row (price / audio s per s); kept with the sweep":
        "可选：为每一行加上每音频小时的美元成本（价格 / 每秒生成的音频秒数）；随扫描一起保存",
    "every cell is measured on each machine carrying one of these Ray resource labels":
        "每个单元都会在带有这些 Ray 资源标签之一的每台机器上测量",
    "off": "关", "on": "开",
    # the engines' summaries (chattts_lab.engines: each engine's `summary`)
    "ChatTTS's own Chat.infer, untouched (the reference)": "ChatTTS 自带的 Chat.infer，未做改动（基准）",
    "this project's decode loop over the same weights (README: the lab engine)":
        "本项目在同一份权重上的解码循环（见 README：the lab engine）",
    "the lab's decode loop with the GPT exported to ONNX Runtime (README: the onnx engine)":
        "lab 的解码循环，GPT 导出到 ONNX Runtime 运行（见 README：the onnx engine）",
    # the Serving panel
    "Many users at once against this app's `/v1/audio/speech`: continuous batching (a request joins the running "
    "generation at the next step) and request-level batching (batches of up to N requests; max batch 1: one request "
    "at a time). Each scheduling and batch limit starts its own copy of the app on this machine; the numbers are what "
    "its clients saw. **Find capacity** answers how many real-time listeners this machine holds under a service "
    "level.":
        "多个用户同时请求本应用的 `/v1/audio/speech`：连续批处理（请求在下一步加入正在进行的生成）与请求级批处理"
        "（每批最多 N 个请求；最大批 1：一次一个请求）。每种调度方式和批大小上限都会在本机启动一个独立的应用副本；"
        "数字是其客户端实际看到的结果。**查找容量**回答在给定服务水平下本机能同时支撑多少个实时收听者。",
    "Concurrent users (list or range)": "并发用户数（列表或范围）",
    "Max batch (one app each; 1 = one at a time)": "最大批大小（每个值一个应用；1 = 一次一个）",
    "Requests per user": "每用户请求数",
    "Audio tokens per request": "每请求音频 token 数",
    "Stream (measures time to first audio)": "流式（测量首段音频时间）",
    "the app's default": "应用默认值",
    "Scheduling (continuous: one app; request-level: one app per max batch)":
        "调度方式（continuous：一个应用；request：每个最大批大小一个应用）",
    "optional: a capacity then says what an audio hour costs (price / streams held)":
        "可选：容量结果会给出每音频小时的成本（价格 / 支撑的流数）",
    "Run serving benchmark": "运行服务基准测试",
    "Load levels: a row per level once a run starts (or Show picks runs from the history)":
        "负载等级：运行开始后每个等级一行（或用“显示”从历史中选取）",
    "Latency vs users": "延迟与用户数",
    "Throughput vs users": "吞吐量与用户数",
    "Capacity search": "容量搜索",
    "### Serving runs in the history": "### 历史中的服务测试",
    "Runs": "测试记录",
    "continuous": "连续批处理（continuous）",
    "request": "请求级批处理（request）",
    "Show": "显示",
    "Real-time streams held (capacity runs, every machine in the history; Show narrows to the picked runs)":
        "支撑的实时流数（容量测试，历史中的所有机器；“显示”只列出所选记录）",
    "Find capacity: raise the users until the service level breaks (the users box is not used)":
        "查找容量：逐步增加用户数直到服务水平被打破（不使用用户数输入框）",
    "Service level: p99 first audio at most (s)": "服务水平：p99 首段音频时间上限（秒）",
    "…and streams with no stall over 100 ms at least (%)": "……且无超过 100 ms 卡顿的流至少占（%）",
    "Most users tried": "最多尝试的用户数",
    "Streams measured per level, at least": "每个等级至少测量的流数",
    "Confirm: seconds of Poisson arrivals near the capacity found (0: none)":
        "确认：在找到的容量附近以泊松到达运行的秒数（0：不确认）",
    # the quality panel
    "### Quality beside speed (sweeps run with `--quality` or the form's quality box)":
        "### 速度旁的音质（使用 `--quality` 或表单中的音质选项运行的扫描）",
    "Quality figure": "音质指标",
    "predicted MOS": "预测 MOS",
    "WER %": "WER %",
    "speaker similarity": "说话人相似度",
    "Largest MOS drop from stock fp32": "相对 stock fp32 的最大 MOS 下降",
    "Largest WER rise (points)": "最大 WER 上升（百分点）",
    "Fastest within the floor": "满足下限的最快配置",
    "RTF vs quality (Pareto front)": "RTF 与音质（帕累托前沿）",
})

# Browsers say zh-CN (or zh); both read the same texts. English is the keys themselves.
I18N = gr.I18n(en={key: key for key in ZH}, zh=ZH, **{"zh-CN": ZH})


def t(english: str):
    """`english` as a translatable text where a translation exists; otherwise the English text as it is."""
    return I18N(english) if english in ZH else english


def tr(english: str, chinese: str):
    """A text made when the page is built (it names this machine's devices, engines, numbers) with its Chinese made
    beside it: the pair joins the translations (English stays the key), so it reads like any other key."""
    ZH[english] = chinese
    I18N.translations["en"][english] = english
    return I18N(english)
