"""The Gradio face of ChatTTS Lab: one builder per tab and its handlers, every module Gradio code.

Handlers only adapt UI values to `chattts_lab` calls; all model, measurement and voice logic lives there, and what
answers requests (the batching, the /v1 route, the app's context) in `chattts_lab.serve`.
"""
