"""python-for-android's entry point (build.sh copies it to the APK's root): the Fleet device app.

On a phone the app keeps its settings, drawings and models in the app's private files folder
(Kivy's ``App.user_data_dir``); the platform backends are the Android ones (client/_platform.py).
"""

from client.app import run

run()
