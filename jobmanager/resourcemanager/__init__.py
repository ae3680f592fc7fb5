"""The ResourceManager: registered TaskManagers and their slots (the SlotManager)."""
