"""Real-browser tests: the Streamlit app on 127.0.0.1 driven by headless Chromium (see conftest)."""
