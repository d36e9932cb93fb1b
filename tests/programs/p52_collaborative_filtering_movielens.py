"""Collaborative Filtering for Movie Recommendations.

Source: https://keras.io/examples/structured_data/collaborative_filtering_movielens/
(keras-team/keras-io, examples/structured_data/collaborative_filtering_movielens.py, the
backend-agnostic Keras 3 version: ``import keras``, ``ops.tensordot``, ``ops.nn.sigmoid``).

Adaptations:
- imports: ``import keras`` -> ``import kiln as keras``, ``from keras import layers/ops`` ->
  ``from kiln import layers/ops``;
- data: synthetic ``ratings.csv`` / ``movies.csv`` of MovieLens' "ml-latest-small" layout
  (userId, movieId, rating in 0.5..5.0 by halves, timestamp; movieId, title, genres), 200
  users x 400 movies, 8,000 ratings (the original: 610 x 9,742, 100,836), written to a
  folder ``movielens_dir`` instead of ``keras.utils.get_file`` + ``ZipFile`` extraction;
- epochs: 1 instead of 5;
- ``matplotlib`` is forced to its non-interactive "Agg" backend (``plt.show()`` draws nothing);
- a final ``print`` of the validation loss (for the test's bound).
"""

# ruff: noqa: I001, UP031, UP032, F811, E712, E402, E501  (kept as in the original text)

import matplotlib

matplotlib.use("Agg")

import pandas as pd
from pathlib import Path
import matplotlib.pyplot as plt
import numpy as np

import kiln as keras
from kiln import layers
from kiln import ops

"""
## First, load the data and apply preprocessing
"""

# (adapted: synthetic files of the ml-latest-small layout instead of the download)
movielens_dir = Path("ml-latest-small")
movielens_dir.mkdir(exist_ok=True)
_rng = np.random.default_rng(0)
_users, _movies, _n = 200, 400, 8000
_taste = _rng.normal(size=(_users, 4))
_kind = _rng.normal(size=(_movies, 4))
_u = _rng.integers(1, _users + 1, _n)
_m = _rng.choice(np.arange(1, 3 * _movies, 3), _n)  # non-sequential movie ids, as MovieLens'
_score = np.einsum("nk,nk->n", _taste[_u - 1], _kind[(_m - 1) // 3])
_rating = np.clip(np.round((3.0 + _score + _rng.normal(scale=0.5, size=_n)) * 2) / 2, 0.5, 5.0)
pd.DataFrame({"userId": _u, "movieId": _m, "rating": _rating,
              "timestamp": 964982703 + np.arange(_n)}).to_csv(
    movielens_dir / "ratings.csv", index=False)
pd.DataFrame({"movieId": np.arange(1, 3 * _movies, 3),
              "title": [f"Movie {i} ({1950 + i % 70})" for i in range(_movies)],
              "genres": [["Comedy", "Drama|Romance", "Action|Thriller", "Animation|Children"][i % 4]
                         for i in range(_movies)]}).to_csv(movielens_dir / "movies.csv",
                                                           index=False)

ratings_file = movielens_dir / "ratings.csv"
df = pd.read_csv(ratings_file)

"""
First, need to perform some preprocessing to encode users and movies as integer indices.
"""
user_ids = df["userId"].unique().tolist()
user2user_encoded = {x: i for i, x in enumerate(user_ids)}
userencoded2user = {i: x for i, x in enumerate(user_ids)}
movie_ids = df["movieId"].unique().tolist()
movie2movie_encoded = {x: i for i, x in enumerate(movie_ids)}
movie_encoded2movie = {i: x for i, x in enumerate(movie_ids)}
df["user"] = df["userId"].map(user2user_encoded)
df["movie"] = df["movieId"].map(movie2movie_encoded)

num_users = len(user2user_encoded)
num_movies = len(movie_encoded2movie)
df["rating"] = df["rating"].values.astype(np.float32)
# min and max ratings will be used to normalize the ratings later
min_rating = min(df["rating"])
max_rating = max(df["rating"])

print(
    "Number of users: {}, Number of Movies: {}, Min rating: {}, Max rating: {}".format(
        num_users, num_movies, min_rating, max_rating
    )
)

"""
## Prepare training and validation data
"""
df = df.sample(frac=1, random_state=42)
x = df[["user", "movie"]].values
# Normalize the targets between 0 and 1. Makes it easy to train.
y = (
    df["rating"]
    .apply(lambda x: (x - min_rating) / (max_rating - min_rating))
    .values
)
# Assuming training on 90% of the data and validating on 10%.
train_indices = int(0.9 * df.shape[0])
x_train, x_val, y_train, y_val = (
    x[:train_indices],
    x[train_indices:],
    y[:train_indices],
    y[train_indices:],
)

"""
## Create the model
"""
EMBEDDING_SIZE = 50


class RecommenderNet(keras.Model):
    def __init__(self, num_users, num_movies, embedding_size, **kwargs):
        super().__init__(**kwargs)
        self.num_users = num_users
        self.num_movies = num_movies
        self.embedding_size = embedding_size
        self.user_embedding = layers.Embedding(
            num_users,
            embedding_size,
            embeddings_initializer="he_normal",
            embeddings_regularizer=keras.regularizers.l2(1e-6),
        )
        self.user_bias = layers.Embedding(num_users, 1)
        self.movie_embedding = layers.Embedding(
            num_movies,
            embedding_size,
            embeddings_initializer="he_normal",
            embeddings_regularizer=keras.regularizers.l2(1e-6),
        )
        self.movie_bias = layers.Embedding(num_movies, 1)

    def call(self, inputs):
        user_vector = self.user_embedding(inputs[:, 0])
        user_bias = self.user_bias(inputs[:, 0])
        movie_vector = self.movie_embedding(inputs[:, 1])
        movie_bias = self.movie_bias(inputs[:, 1])
        dot_user_movie = ops.tensordot(user_vector, movie_vector, 2)
        # Add all the components (including bias)
        x = dot_user_movie + user_bias + movie_bias
        # The sigmoid activation forces the rating to between 0 and 1
        return ops.nn.sigmoid(x)


model = RecommenderNet(num_users, num_movies, EMBEDDING_SIZE)
model.compile(
    loss=keras.losses.BinaryCrossentropy(),
    optimizer=keras.optimizers.Adam(learning_rate=0.001),
)

"""
## Train the model based on the data split
"""
history = model.fit(
    x=x_train,
    y=y_train,
    batch_size=64,
    epochs=1,
    verbose=1,
    validation_data=(x_val, y_val),
)

"""
## Plot training and validation loss
"""
plt.plot(history.history["loss"])
plt.plot(history.history["val_loss"])
plt.title("model loss")
plt.ylabel("loss")
plt.xlabel("epoch")
plt.legend(["train", "test"], loc="upper left")
plt.show()

"""
## Show top 10 movie recommendations to a user
"""

movie_df = pd.read_csv(movielens_dir / "movies.csv")

# Let us get a user and see the top recommendations.
user_id = df.userId.sample(1).iloc[0]
movies_watched_by_user = df[df.userId == user_id]
movies_not_watched = movie_df[
    ~movie_df["movieId"].isin(movies_watched_by_user.movieId.values)
]["movieId"]
movies_not_watched = list(
    set(movies_not_watched).intersection(set(movie2movie_encoded.keys()))
)
movies_not_watched = [[movie2movie_encoded.get(x)] for x in movies_not_watched]
user_encoder = user2user_encoded.get(user_id)
user_movie_array = np.hstack(
    ([[user_encoder]] * len(movies_not_watched), movies_not_watched)
)
ratings = model.predict(user_movie_array).flatten()
top_ratings_indices = ratings.argsort()[-10:][::-1]
recommended_movie_ids = [
    movie_encoded2movie.get(movies_not_watched[x][0])
    for x in top_ratings_indices
]

print("Showing recommendations for user: {}".format(user_id))
print("====" * 9)
print("Movies with high ratings from user")
print("----" * 8)
top_movies_user = (
    movies_watched_by_user.sort_values(by="rating", ascending=False)
    .head(5)
    .movieId.values
)
movie_df_rows = movie_df[movie_df["movieId"].isin(top_movies_user)]
for row in movie_df_rows.itertuples():
    print(row.title, ":", row.genres)

print("----" * 8)
print("Top 10 movie recommendations")
print("----" * 8)
recommended_movies = movie_df[movie_df["movieId"].isin(recommended_movie_ids)]
for row in recommended_movies.itertuples():
    print(row.title, ":", row.genres)

print("val loss:", history.history["val_loss"][-1])  # (adapted: printed for the test)
