"""The Gradio face of ChatTTS Lab: one builder per tab, plain handlers, routes served beside the UI.

Handlers only adapt UI values to `chattts_lab` calls; all model, measurement and voice logic lives there.
"""
