"""The engine side of the pages, no Streamlit here: view models for the editor canvas, diagrams, the Evolve
story, History and Compare."""
